"""Reaping the agent's orphans when the env is its container's PID 1.

A process whose parent dies is handed to PID 1, which must wait for it once it exits; until
then it stays a zombie that holds a slot of the container's pids limit. So an agent that kills
its own shells, or a shell tool that stops a timed-out command with its children, would leave
zombies that add up to a container where nothing more can start. Only the agent's processes
that the env did not start itself are reaped: those it did start, `subprocess` waits for (a
reaped one would read as "exit status 0")."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

EVERY_S = 0.5


def start_reaper(uid: int, started_by_the_env: Callable[[], set[int]], starting: threading.Lock) -> None:
    """In a daemon thread, every EVERY_S reap the exited children of this process that belong
    to `uid` and are not among `started_by_the_env()`; `starting` is held while the env starts
    a child and records it (else one that exits at once could be reaped before it is known)."""

    def reap_forever() -> None:
        while True:
            with starting:
                for pid in _zombie_children(uid) - started_by_the_env():
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:  # reaped by its own waiter meanwhile
                        pass
            time.sleep(EVERY_S)

    threading.Thread(target=reap_forever, name="corral-orphan-reaper", daemon=True).start()


def children() -> set[int]:
    """The pids of this process's children, living or exited."""
    me = str(os.getpid())
    return {pid for pid, _, parent, _ in _processes() if parent == me}


def _zombie_children(uid: int) -> set[int]:
    me = str(os.getpid())
    return {pid for pid, state, parent, owner in _processes() if state == "Z" and parent == me and owner == uid}


def _processes() -> Iterator[tuple[int, str, str, int]]:
    """(pid, state, parent pid, real uid) of every process this one can see."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                # After the command's name, in parentheses that it may itself contain: state, ppid.
                state, parent = stat.read().rpartition(")")[2].split()[:2]
            owner = os.stat(f"/proc/{name}").st_uid
        except OSError:  # gone meanwhile
            continue
        yield int(name), state, parent, owner
