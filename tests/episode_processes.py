"""An agent's shell in a local episode (shellfix's `bash` tool), and its processes as this
machine sees them: an episode's namespace numbers its processes its own way, so a process
the agent starts is found here by a tag on its command line."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from tests.wire import called


def bash(socket, command: str) -> str:
    """The output of `command` run by the episode's env, without its exit status line."""
    return called(socket, "bash", command=command).result.rsplit("\n", 1)[0]


def tag() -> str:
    """A word no other process's command line holds."""
    return f"corral-test-{uuid.uuid4().hex}"


def host_pids(word: str) -> list[int]:
    """This machine's shells (`/bin/sh`) whose command line holds `word`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            if command.startswith(b"/bin/sh\0") and word.encode() in command:
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def detached(socket, escape: str = "setsid", script: str = "sleep 600") -> int:
    """Leave `script` running from the episode's env (`/bin/sh -c`) in a session of its own
    (`escape`: setsid, or `setsid env -i`, which also clears the marker in its environment);
    its pid here, once it has left bash's process group (killed before, it would not outlive
    the call)."""
    word = tag()
    bash(
        socket,
        f"{escape} /bin/sh -c '{script}; : {word}' < /dev/null > /dev/null 2>&1 & p=$!; "
        'until [ "$(cut -d" " -f6 /proc/$p/stat)" = "$p" ]; do sleep 0.01; done',
    )
    return one_host_pid(word)


def one_host_pid(word: str, timeout_s: float = 10.0) -> int:
    """The pid here of the one process whose command line holds `word`, once it runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = host_pids(word)
        # A shell's fork, before it runs its command, has the shell's command line too.
        parents = {pid: parent_of(pid) for pid in pids}
        shells = [pid for pid, parent in parents.items() if parent is not None and parent not in parents]
        if shells:
            assert len(shells) == 1, shells
            return shells[0]
        time.sleep(0.05)
    raise AssertionError(f"no process with {word} on its command line started within {timeout_s:.0f}s")


def parent_of(pid: int) -> int | None:
    """The parent of `pid`, None once it has ended."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether `pid` has ended (a zombie waiting for its parent counts) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False
