"""Finding and ending a local episode's processes, and the uids that keep episodes apart.

Every process of a local episode is started with the environment variable `CORRAL_SANDBOX`
set to `<instance>/<episode folder>/<role>`, and its children inherit it, so every process of
an episode can be found by reading `/proc/*/environ` (Linux), even one that left the env's
process group (`setsid`) or was reparented to init; one that cleared its own environment
(`env -i`) escapes that search.

A server running as root does better: each episode's env runs as a uid of its own, taken
from a machine-wide range by locking a file per uid in one root-owned folder of the host,
/run/corral/uids (so two servers never share one, whatever their TMPDIRs), and
`kill -9 -1` run as that uid ends every process it has, whatever its environment says. Where
the episode's env is corral's runtime in bubblewrap's namespaces, it takes three (`Users`): the
env's, the agent's and the verifier's, as the docker sandbox's three users (shared.users),
each from the same range rather than docker's fixed 1000 and 1001, which may be accounts of
this machine: a uid no account has, and no other episode holds, is no one's but the episode's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corral.errors import SandboxError
from corral.sandboxes.runtime_dirs import private_folder

MARKER = "CORRAL_SANDBOX"
KILL_ROUNDS = 5  # a process may fork while the last round went by: look again, a few times
UID_BASE, UID_COUNT = 1_000_000, 65_536  # the range local envs run as when the server is root
# One place per host, whatever a server's TMPDIR: two servers locking apart would hand out the
# same uid, and the first take of a uid kills every process of it, the other server's too.
UIDS_DIR = Path("/run/corral/uids")
SETPRIV_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def minimal_environment(home: Path, tmp: Path, marker: str) -> dict[str, str]:
    """What an episode's processes get of an environment: nothing of the server's but PATH and
    LANG; `marker` is their CORRAL_SANDBOX."""
    return {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        MARKER: marker,
    }


@dataclass(frozen=True)
class Users:
    """The uids of one episode of a root server (each its own group too): its env's, the
    agent's processes' (corral.env.agent) and its verifier's; one uid for all three where the
    episode cannot keep them apart."""

    env: int
    agent: int
    verifier: int

    @property
    def apart(self) -> bool:
        return self.agent != self.env

    def all(self) -> list[int]:
        return list(dict.fromkeys((self.env, self.agent, self.verifier)))


def running_as_root() -> bool:
    """Whether episodes can get uids of their own (the server is root)."""
    return os.geteuid() == 0


def marked_pids(prefix: str) -> list[int]:
    """Processes whose CORRAL_SANDBOX starts with `prefix` (those this user may read)."""
    wanted = f"{MARKER}={prefix}".encode()
    found = []
    with contextlib.suppress(FileNotFoundError):  # no /proc: not Linux, nothing to find
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as environ:
                    variables = environ.read().split(b"\0")
            except OSError:  # gone, or another user's
                continue
            if any(variable.startswith(wanted) for variable in variables):
                found.append(int(entry.name))
    return found


def kill_marked(prefix: str) -> int:
    """SIGKILL every process marked with `prefix`, until none is left; how many (blocking)."""
    killed = 0
    for _ in range(KILL_ROUNDS):
        pids = [pid for pid in marked_pids(prefix) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(pids)
    return killed


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def as_uid(uid: int | None, command: Sequence[str]) -> list[str]:
    """`command` run as `uid` (None: as this process's user), with no supplementary groups and
    no way to gain privileges (setuid files do nothing). Through util-linux's `setpriv`, which
    then execs the command in the same process: event loops such as uvloop cannot switch users
    in the child themselves, and setpriv looks the command up on PATH as the new user."""
    if uid is None:
        return list(command)
    if "/" in command[0] and not runnable_by_anyone(command[0]):
        raise SandboxError(
            f"{command[0]} cannot be run by other users, and a server running as root runs each local "
            "env as a uid of its own: use a command every user may run (its folders too), or serve "
            "as another user"
        )
    setpriv = shutil.which("setpriv", path=SETPRIV_PATH)
    if setpriv is None:
        raise SandboxError(
            "a server running as root runs each local env as a uid of its own, through util-linux's "
            "setpriv, which is not installed: install util-linux, or serve as another user"
        )
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--", *command]


def runnable_by_anyone(path: str) -> bool:
    """Whether any user may run `path` by its mode bits: every folder above it searchable by
    others, the file executable by them."""
    real = Path(os.path.realpath(path))
    try:
        return all(folder.stat().st_mode & stat.S_IXOTH for folder in real.parents) and bool(
            real.stat().st_mode & stat.S_IXOTH
        )
    except OSError:
        return False


async def kill_uid(uid: int) -> None:
    """End every process of `uid` at once: `kill -9 -1` as that uid (root only)."""
    killer = await asyncio.create_subprocess_exec(
        *as_uid(uid, ["/bin/sh", "-c", "kill -9 -1; kill -9 -1; exit 0"]),
        cwd="/",
        env={},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await killer.wait()


class UidPool:
    """Uids for episodes of a root server: one each, held (a lock on a file) while it lives."""

    def __init__(self) -> None:
        self._held: dict[int, int] = {}  # uid -> the fd of its locked file
        self._cleaned: set[int] = set()

    async def take(self) -> int:
        """A free uid of the range, with nothing of a killed server's left running under it."""
        uid = await asyncio.to_thread(self._lock_one)
        if uid not in self._cleaned:  # a killed server's process may still run as it
            await kill_uid(uid)
            self._cleaned.add(uid)
        return uid

    def release(self, uid: int) -> None:
        fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # closing the file drops its lock

    def _lock_one(self) -> int:
        for folder in (UIDS_DIR.parent, UIDS_DIR):
            private_folder(folder, 0o700, fix="serve with --sandbox docker")
        # The lowest free one: a few lock files cover a server's life, whatever its episode count.
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if uid in self._held or _is_a_user(uid):
                continue
            fd = os.open(UIDS_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another server's episode has it
                os.close(fd)
                continue
            self._held[uid] = fd
            return uid
        raise SandboxError(
            f"every uid from {UID_BASE} to {UID_BASE + UID_COUNT - 1} is taken by a local "
            "episode; end some episodes, or serve with --sandbox docker"
        )


def _is_a_user(uid: int) -> bool:
    """Whether `uid` belongs to an account of this machine (never run an env as one)."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
