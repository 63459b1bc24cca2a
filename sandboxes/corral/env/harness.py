"""A harness episode's agent, run by corral's runtime inside the sandbox (`corral/run_agent`).

The server asks for it once per episode: the runtime starts the model relay (corral.env.relay)
on the sandbox's loopback, joined to the server's socket in the folder the sandbox was given,
then the agent's command as the agent's user (corral.env.agent) in a session of its own, and
waits for it. At the time limit, or once it has exited, its whole process group is killed, and
so is each process it detached from that group (`setsid`): the runtime is their subreaper, so
orphaned they become its children. Nothing it started keeps calling the model or writing files
while the verifiers run. Its
output's tail comes back for the episode's record.

Standard library only, as all of corral.env.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time

from corral.env import agent, orphans
from corral.env.relay import Relay

OUTPUT_CHARS = 8000  # the tail of the agent's output that comes back
_PR_SET_CHILD_SUBREAPER = 36
QUIET_SCANS = 3  # scans finding no leftover in a row: every orphan has been handed to us and killed


def run_agent(params: dict) -> dict:
    """{"command": [...], "environment": {...}, "socket": path, "port": int, "timeout_s": float}
    -> {"exit_code": int | None (None: killed at the time limit), "timed_out": bool, "output": str}."""
    relay = Relay(params["socket"], params["port"])
    relay.start()
    _become_subreaper()
    before = orphans.children()
    try:
        with tempfile.TemporaryFile() as output:
            process = agent.popen(
                params["command"],
                env={**os.environ, **params["environment"]},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: killed whole, whatever it started
            )
            try:
                exit_code: int | None = process.wait(timeout=params["timeout_s"])
            except subprocess.TimeoutExpired:
                exit_code = None
            _kill_group(process.pid)
            process.wait()
            _kill_leftovers(before | agent.started())
            size = output.seek(0, os.SEEK_END)
            output.seek(max(0, size - OUTPUT_CHARS))
            text = output.read().decode("utf-8", errors="replace")
    finally:
        relay.close()
    return {"exit_code": exit_code, "timed_out": exit_code is None, "output": text}


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group has ended already


def _become_subreaper() -> None:
    """Have the agent's orphans handed to this process (not the sandbox's init), to be killed."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _kill_leftovers(keep: set[int]) -> None:
    """Kill and reap this process's children other than `keep`: what the agent detached, handed
    here as its parents die, until QUIET_SCANS scans in a row find none."""
    quiet = 0
    while quiet < QUIET_SCANS:
        leftovers = orphans.children() - keep
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass  # ended and reaped meanwhile
        quiet = 0 if leftovers else quiet + 1
        time.sleep(0.02)
