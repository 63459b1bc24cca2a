"""A local episode's processes in namespaces of their own, through bubblewrap (`bwrap`).

What a process started here sees (`Bubblewrap.command`):
- no network at all: a network namespace of its own, whose loopback is its own too, so
  nothing on this machine's 127.0.0.1 (corral's own API included) can be reached;
- its own PID, IPC and UTS namespaces: /proc lists its processes alone, and when the
  namespace's first process (bubblewrap's init, or the command itself with `as_pid_1`) dies,
  the kernel kills every other one in it, `setsid` and `env -i` or not;
- a fresh root: the system's folders (/usr, /bin, /lib*, /sbin, /etc) read-only, a private
  /dev and /proc (the root and /dev read-only), fresh /tmp, /var/tmp and /dev/shm (one tmpfs
  sized in bytes and files for the three where the server is root, local.sandbox's scratch;
  else bwrap's, sized in bytes each; gone with the namespace either way), and
  only the folders it is given: read-only ones (the env's folder, corral's SDK, a verifier's
  files) and writable ones (its work folder), each at its own path. Nothing else of this
  machine's files: not the bundle, not another episode's folder, not the server's home;
- no privileges (`--new-session`, no capabilities, `no_new_privs`) and a seccomp filter that
  refuses what docker's default profile refuses (local.seccomp: keyrings, new namespaces,
  mounts, bpf, userfaultfd...); `--die-with-parent`: it dies with the server. Run by any user, bwrap maps that user alone into a user namespace of
  its own, which may make no other (`--disable-userns`). Run by root for an env whose agent
  gets a uid of its own (`capabilities`), bwrap makes no user namespace: the env starts as
  root holding only the capabilities it names, and takes on its users itself
  (corral.env.agent), as in a docker container.

An env runs `as_pid_1`, without bubblewrap's init: that init holds the protocol's stdio and,
unlike the env (corral.env.runtime makes itself non-dumpable), can be opened under /proc by
the agent's processes of the same user; where those are pipes of that user (a server that is
not root, on asyncio's loop), a line written to /proc/1/fd/1 reached the server as the env's
answer: a forged report. As the first process, the env also ignores SIGSTOP and SIGKILL sent
from inside its namespace.

Whether it can run is found once per provider by a real run (`find_bubblewrap`): bwrap may
be missing, or the kernel may refuse user namespaces to the user that runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corral.sandboxes.local.procs import as_uid, kill_group
from corral.sandboxes.local.seccomp import program_fd

SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
SCRATCH_FOLDERS = ("tmp", "var-tmp", "shm")  # in a `scratch` folder, bound at PRIVATE_TMP
PROBE_TIMEOUT_S = 20.0
END_TIMEOUT_S = 30.0  # the kernel kills a namespace's processes at once; this is only a backstop


@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap that was seen to make namespaces here."""

    path: str

    def command(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        read_only: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        tmp_mb: int = 64,
        scratch: Path | None = None,
        network: bool = False,
        info_fd: int | None = None,
        seccomp_fd: int | None = None,
        as_pid_1: bool = False,
        capabilities: Sequence[str] | None = None,
    ) -> list[str]:
        """`command` run in fresh namespaces (the module docstring), in `cwd`, seeing the system
        and `read_only` read-only, `writable` writable, and nothing else; `network` shares this
        machine's network (an env that asks for egress); /tmp, /var/tmp and /dev/shm are
        `scratch`'s folders of those names (SCRATCH_FOLDERS: a sized tmpfs the caller mounted,
        bounding bytes and files together), else tmpfs of `tmp_mb` each; `as_pid_1`: `command` is the
        namespace's first process (no init); bwrap writes that first process's pid to `info_fd`
        and installs the seccomp program it reads from `seccomp_fd` (local.seccomp).
        `capabilities` (bwrap run by root): no user namespace, `command` starts as root with
        only these (such as CAP_SETUID) in all its sets; None: a user namespace, none."""
        argv = [self.path, "--die-with-parent", "--new-session"]
        if capabilities is None:
            argv += ["--unshare-all", "--unshare-user", "--disable-userns", *(["--share-net"] if network else [])]
        else:  # every namespace but the user's (--unshare-all would try one, where no other uid maps)
            argv += [
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-uts",
                "--unshare-cgroup-try",
                *([] if network else ["--unshare-net"]),
                "--cap-drop",
                "ALL",
                *(part for name in capabilities for part in ("--cap-add", name)),
            ]
        if as_pid_1:
            argv.append("--as-pid-1")
        if info_fd is not None:
            argv += ["--info-fd", str(info_fd)]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):  # merged /usr: /bin -> usr/bin
                argv += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                argv += ["--ro-bind", folder, folder]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--perms", "0755", "--dir", "/var"]  # bwrap makes a bind's parents 0700: other users could not pass
        for folder, name in zip(PRIVATE_TMP, SCRATCH_FOLDERS, strict=True):
            if scratch is not None:
                argv += ["--bind", str(scratch / name), folder]
            else:  # bwrap sizes its tmpfs by bytes alone: files are bounded only where `scratch` is given
                argv += ["--perms", "1777", "--size", str(tmp_mb << 20), "--tmpfs", folder]  # shared, sticky
        for folder in _made_above(read_only, writable):
            argv += ["--perms", "0711", "--dir", folder]
        for path in read_only:
            argv += ["--ro-bind", str(path), str(path)]
        for path in writable:
            argv += ["--bind", str(path), str(path)]
        # The root and /dev bwrap builds are tmpfs of no size: nothing more is written there.
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
        return [*argv, "--chdir", str(cwd), "--", *command]

    @staticmethod
    def finds(name: str, search_path: str, read_only: Sequence[Path]) -> bool:
        """Whether `name` is a program a namespace seeing the system and `read_only` can run,
        found as exec would find it on `search_path` (PATH): a missing one is refused before
        bwrap starts, as a plain process's would be."""
        seen = [Path(folder) for folder in SYSTEM_FOLDERS] + [Path(path) for path in read_only]
        candidates = [name] if "/" in name else [os.path.join(folder, name) for folder in search_path.split(os.pathsep)]
        for candidate in candidates:
            real = Path(os.path.realpath(candidate))
            if os.path.isfile(real) and os.access(real, os.X_OK) and any(real.is_relative_to(top) for top in seen):
                return True
        return False


def _made_above(*groups: Sequence[Path]) -> list[str]:
    """The folders above `groups`' paths that bwrap makes to mount them at (outside the
    system's), outermost first: left to it, they are 0700 and root's, which the users an env
    started as root takes on (corral.env.agent) could not pass; 0711 lets them pass, as the
    server's own folders (0711) do, and list nothing."""
    above = {str(parent) for paths in groups for path in paths for parent in Path(path).parents}
    mounted = {"/", *SYSTEM_FOLDERS, *PRIVATE_TMP}
    return sorted(
        (
            folder
            for folder in above
            if folder not in mounted and not any(Path(folder).is_relative_to(top) for top in SYSTEM_FOLDERS)
        ),
        key=lambda folder: folder.count("/"),
    )


def find_bubblewrap(uid: int | None) -> Bubblewrap | str:
    """A bwrap that works for `uid` (None: this process's user), or why there is none: it is
    looked up on PATH and run once, as the envs will run it."""
    path = shutil.which("bwrap")
    if path is None:
        return "bubblewrap (bwrap) is not installed"
    bubblewrap = Bubblewrap(path)
    if why := refusal(bubblewrap, uid):
        return f"{path} cannot make namespaces here ({why}); user namespaces may be disallowed"
    return bubblewrap


def refusal(bubblewrap: Bubblewrap, uid: int | None, capabilities: Sequence[str] | None = None) -> str:
    """Why `bubblewrap` cannot run a command as `uid` (with `capabilities`: as root holding
    those, Bubblewrap.command), "" when it can: a root in a container without CAP_SYS_ADMIN
    may make namespaces only within a user namespace of its own, for one; under the episodes'
    seccomp filter, which a kernel without seccomp refuses."""
    try:
        seccomp = program_fd()
    except ValueError as error:  # an architecture the filter has no numbers for
        return str(error)
    try:
        ran = subprocess.run(
            as_uid(uid, bubblewrap.command(["true"], cwd=Path("/"), seccomp_fd=seccomp, capabilities=capabilities)),
            pass_fds=(seccomp,),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"it could not run: {error}"
    finally:
        os.close(seccomp)
    if ran.returncode != 0:
        return (ran.stderr.strip().splitlines() or [f"exit status {ran.returncode}"])[-1]
    return ""


class Contained:
    """A process started in namespaces of its own; `end()` ends them and all in them."""

    def __init__(self, process: asyncio.subprocess.Process, init_pid: int | None, scratch: Path | None = None):
        self.process = process
        self.scratch = scratch  # its /tmp, /var/tmp and /dev/shm (Bubblewrap.command), which its caller removes
        # A pidfd holds the init, not its number: a reused pid is never signalled.
        self._init = os.pidfd_open(init_pid) if init_pid is not None else -1

    @classmethod
    async def start(
        cls,
        bubblewrap: Bubblewrap,
        uid: int | None,
        command: Sequence[str],
        *,
        cwd: Path,
        read_only: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        tmp_mb: int = 64,
        scratch: Path | None = None,
        network: bool = False,
        as_pid_1: bool = False,
        limits: Sequence[str] = (),
        capabilities: Sequence[str] | None = None,
        **popen,
    ) -> Contained:
        """Start `command` as `uid` in namespaces (Bubblewrap.command; with `capabilities`,
        `uid` is None: as root holding only those), through `limits` (a command prefix, such
        as local.quota.file_size_limit's); `popen` goes to create_subprocess_exec. OSError when
        bwrap, or `command` within it, cannot be started."""
        if not bubblewrap.finds(command[0], popen["env"].get("PATH", ""), read_only):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory in the sandbox's view", command[0])
        read, write = os.pipe()
        seccomp = program_fd()
        try:
            argv = bubblewrap.command(
                command,
                cwd=cwd,
                read_only=read_only,
                writable=writable,
                tmp_mb=tmp_mb,
                scratch=scratch,
                network=network,
                info_fd=write,
                seccomp_fd=seccomp,
                as_pid_1=as_pid_1,
                capabilities=capabilities,
            )
            process = await asyncio.create_subprocess_exec(
                *limits, *as_uid(uid, argv), pass_fds=(write, seccomp), cwd="/", start_new_session=True, **popen
            )
            os.close(write)
            write = -1
            try:
                info = await _read_to_end(read)
            except BaseException:  # cancelled while it started: bwrap dies, its namespace with it (--die-with-parent)
                kill_group(process.pid)
                raise
        finally:
            os.close(read)
            os.close(seccomp)
            if write >= 0:
                os.close(write)
        try:  # nothing written: bwrap failed before its namespaces existed, and says why on stderr
            init_pid = int(json.loads(info)["child-pid"]) if info else None
        except (ValueError, KeyError, TypeError):
            init_pid = None
        try:
            return cls(process, init_pid, scratch)
        except ProcessLookupError:  # the namespace has ended already
            return cls(process, None, scratch)

    async def end(self) -> None:
        """Kill the namespace's init (the kernel then kills every process in it) and wait for
        bwrap, which exits once its init has, so nothing of it is left when this returns."""
        try:
            if self._init >= 0:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._init, signal.SIGKILL)
            try:
                await asyncio.wait_for(self.process.wait(), END_TIMEOUT_S)
            except TimeoutError:
                kill_group(self.process.pid)
                await self.process.wait()
        finally:
            if self._init >= 0:
                os.close(self._init)
                self._init = -1


async def _read_to_end(fd: int) -> bytes:
    """All of a pipe, until its writers close it, without blocking the loop."""
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    data = bytearray()

    def readable() -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if chunk:
            data.extend(chunk)
        elif not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
    return bytes(data)
