"""One episode of the local provider: its env process, its folder, and how both end.

A LocalSandbox makes the episode's folders (as root: owned by the episode's uid, or the agent's
where the episode has three, with a tmpfs of the env's share), starts the env in namespaces of its own where bubblewrap runs (else in a
process group of its own), speaks the protocol over the env's stdin and stdout, and on close
ends every process of the episode and removes its folder. What every episode of a provider
shares on this machine (the instance's root, bubblewrap, the env files, the quotas, the uid
pool) is the `Host`, the LocalProvider (local.py, whose docstring says what is isolated).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from corral.env.agent import AGENT_USER_VARIABLE, ENV_USER_VARIABLE
from corral.errors import SandboxError
from corral.sandboxes.base import CommandResult, Sandbox, SandboxSpec
from corral.sandboxes.local.copies import copy_work
from corral.sandboxes.local.files import EnvFiles
from corral.sandboxes.local.namespace import SCRATCH_FOLDERS, Bubblewrap, Contained
from corral.sandboxes.local.procs import (
    UidPool,
    Users,
    as_uid,
    kill_group,
    kill_marked,
    kill_uid,
    minimal_environment,
)
from corral.sandboxes.local.quota import Quotas, process_limits, unbind, unbind_all_under
from corral.sandboxes.local.verify import verify_on_a_copy
from corral.sandboxes.shared.trees import remove_tree
from corral.sandboxes.shared.users import ID_CAPABILITIES

LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result
ENV_CAPABILITIES = [f"CAP_{name}" for name in ID_CAPABILITIES]  # all an env started as root holds, as in docker


class Host(Protocol):
    """What the episodes of one local provider share on this machine (a LocalProvider)."""

    instance: str
    root: Path  # the instance's folder: each episode's folder is in it
    bubblewrap: Bubblewrap | None  # None: no namespaces here
    files: EnvFiles
    quotas: Quotas
    uids: UidPool | None  # as root: a uid for each episode; else None


class LocalSandbox(Sandbox):
    """One episode's env process, in `folder/work`, as `users` (None: the server's own user;
    set before `launch`, by the host, whose pool they return to on close); `on_close` is told
    when it closes (the provider's count of live sandboxes)."""

    def __init__(self, host: Host, spec: SandboxSpec, folder: Path, on_close: Callable[[LocalSandbox], None]):
        self.host = host
        self.spec = spec
        self.folder = folder  # the server's: the env's stderr, the verifiers' copies
        self.workdir = folder / "work"  # the env's working directory and HOME
        self.users: Users | None = None
        self.marker = f"{host.instance}/{folder.name}/"  # every process of the episode starts with it
        self.verifications = 0
        self.scratches = 0
        self._env: Contained | None = None  # the env's process, in namespaces where bwrap runs
        self._stderr = -1
        self._agent_stopped = False
        self._closed = False
        self._on_close = on_close

    async def launch(self) -> None:
        """Make the episode's folders and start its env; raise SandboxError when it cannot start."""
        spec, contained = self.spec, self.host.bubblewrap is not None
        tmp, stderr_path = self.folder / "tmp", self.folder / "stderr"
        seen = [*self.host.files.visible(spec), *([self.model_folder] if spec.model_channel else [])]
        try:
            # As root, 0711: the episode's uids may pass through to their own folders, and list none.
            self.folder.mkdir(mode=0o711 if self.users is not None else 0o700)
            # Apart, the agent's, which the env's group may read: the env writes there as the agent.
            owner, group, mode = self.workdir_owner()
            self.own(self.workdir, mode, uid=owner, gid=group)
            quotas = self.host.quotas
            quotas.bound(self.workdir, self.share_mb, uid=owner, gid=group, mode=mode)
            if spec.model_channel:  # the server's: the episode's users may pass, and connect to its socket
                self.model_folder.mkdir(mode=0o711)
                socket_path = self.model_folder / "model.sock"
                self._model_socket = socket_path, str(socket_path)
            if not contained:  # in namespaces, /tmp is a tmpfs of the episode's own
                self.own(tmp)
                quotas.bound(tmp, spec.scratch_mb, uid=self.uid)
            # The env writes it, the server reads it by position through the same descriptor:
            # the env cannot swap the file for a link to a secret.
            self._stderr = os.open(stderr_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise SandboxError(
                f"could not make the folders of an episode of env {spec.env_name} in {self.host.root}: {error}"
            ) from None
        environ = minimal_environment(self.workdir, Path("/tmp") if contained else tmp, self.marker + "env")
        environ.update(
            PYTHONPATH=os.pathsep.join(str(path) for path in self.host.files.import_path(spec)), PYTHONUNBUFFERED="1"
        )
        users, capabilities = self.users, None
        if users is not None and users.apart:  # corral's runtime takes them on (corral.env.agent), and the names go
            environ.update(
                {ENV_USER_VARIABLE: f"{users.env}:{users.env}", AGENT_USER_VARIABLE: f"{users.agent}:{users.agent}"}
            )
            capabilities = ENV_CAPABILITIES
        try:
            self._env = await self.spawn(
                spec.command,
                uid=None if capabilities else self.uid,
                cwd=self.workdir,
                environ=environ,
                capabilities=capabilities,
                read_only=seen,
                writable=[self.workdir],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=self._stderr,
                limit=LINE_LIMIT,
                as_pid_1=True,
                file_mb=self.share_mb,
            )
        except OSError as error:
            as_whom = (
                (
                    f" as uid {self.uid} (a server running as root runs each env as its own user: the bundle, "
                    "corral and the command must be readable by every user)"
                )
                if self.users is not None
                else ""
            )
            raise SandboxError(
                f"could not start {spec.command[0]!r} for env {spec.env_name}{as_whom}: {error}"
            ) from None

    async def spawn(
        self,
        command: Sequence[str],
        *,
        uid: int | None,
        cwd: Path,
        environ: dict[str, str],
        read_only: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        as_pid_1: bool = False,
        file_mb: int | None = None,
        capabilities: Sequence[str] | None = None,
        **popen,
    ) -> Contained:
        """`command` as `uid` (one of the episode's `users`; None: the server's user): where bwrap
        runs, in namespaces of its own that see the system, `read_only` and `writable` alone
        (local.namespace; `as_pid_1`: as their first process; `capabilities`: as root holding
        only those); else in a process group of its own. Its files may not pass `file_mb`, and
        where the episode's uids are its own, each holds at most the env's `pids` processes
        (process_limits); each maps at most the env's `memory_mb`. `popen` goes to
        create_subprocess_exec. OSError when it cannot start."""
        processes = self.spec.resources.pids if self.users is not None else None
        limits = process_limits(file_mb=file_mb, processes=processes, memory_mb=self.spec.resources.memory_mb)
        bubblewrap = self.host.bubblewrap
        if bubblewrap is not None:
            return await Contained.start(
                bubblewrap,
                uid,
                command,
                cwd=cwd,
                read_only=read_only,
                writable=writable,
                tmp_mb=self.spec.scratch_mb,
                scratch=self.scratch(),
                network=self.spec.network == "egress",
                as_pid_1=as_pid_1,
                limits=limits,
                capabilities=capabilities,
                env=environ,
                **popen,
            )
        process = await asyncio.create_subprocess_exec(
            *limits, *as_uid(uid, command), cwd=cwd, env=environ, start_new_session=True, **popen
        )
        return Contained(process, None)

    async def end(self, started: Contained, marker: str) -> None:
        """End `started` and every process it started: its namespaces, else every process of
        the episode marked `marker` (as root: of the episode's uid) and its process group."""
        if self.host.bubblewrap is not None:
            await started.end()
            if started.scratch is not None:
                await asyncio.to_thread(unbind, started.scratch)
                await asyncio.to_thread(remove_tree, started.scratch)
        else:
            await self.stop(marker, pgid=started.process.pid)
            await started.process.wait()

    def scratch(self) -> Path | None:
        """Fresh /tmp, /var/tmp and /dev/shm for one process in namespaces: the folders of one
        tmpfs of `scratch_mb` for the three, which bounds files as well as bytes (local.quota);
        None where this server cannot mount one (bwrap's own tmpfs then, sized by bytes alone)."""
        if self.quotas.why_not:
            return None
        self.scratches += 1
        where = self.folder / f"scratch-{self.scratches}"
        where.mkdir(mode=0o755)
        if not self.quotas.bound(where, self.spec.scratch_mb, mode=0o755):
            where.rmdir()
            return None
        for name in SCRATCH_FOLDERS:
            (where / name).mkdir()
            os.chmod(where / name, 0o1777)  # shared and sticky, as /tmp is
        return where

    @property
    def model_folder(self) -> Path:
        """A harness env's channel folder, seen inside at its own path (read-only)."""
        return self.folder / "model"

    @property
    def share_mb(self) -> int:
        """What the env may keep in its work folder: `scratch_mb` for each writable folder, as
        docker allows."""
        return self.spec.scratch_mb * max(1, len(self.spec.writable))

    @property
    def quotas(self) -> Quotas:
        return self.host.quotas

    @property
    def alive(self) -> bool:
        return not self._closed and self._env is not None and self._env.process.returncode is None

    @property
    def uid(self) -> int | None:
        """The env's uid (None: the server's user's)."""
        return self.users.env if self.users is not None else None

    def workdir_owner(self) -> tuple[int | None, int | None, int]:
        """The work folder's owner, group and mode: the agent's, readable by the env's group
        where the agent has a uid of its own (the env writes there as the agent), and passable
        by others (bwrap, as root without CAP_DAC_OVERRIDE, enters it); else the env's."""
        if self.users is not None and self.users.apart:
            return self.users.agent, self.users.env, 0o751
        return self.uid, self.uid, 0o700

    def own(self, path: Path, mode: int = 0o700, *, uid: int | None = None, gid: int | None = None) -> None:
        """Make `path` a folder of `uid` and `gid` (by default the env's user)."""
        path.mkdir(mode=mode)
        uid = self.uid if uid is None else uid
        if uid is not None:
            os.chown(path, uid, uid if gid is None else gid)

    async def send_line(self, line: bytes) -> None:
        process = self._running()
        stdin = process.stdin
        assert stdin is not None
        if process.returncode is not None:  # a process it left behind may still hold the pipe open
            raise EOFError(f"the env process has exited (status {process.returncode})")
        try:
            stdin.write(line + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise EOFError("the env process closed its stdin") from error
        # A write that meets a closed pipe closes the transport, but asyncio tells the stream
        # one turn of the loop later, so drain() may return as if the line went.
        if stdin.is_closing():
            raise EOFError("the env process closed its stdin")

    async def read_line(self) -> bytes:
        stdout = self._running().stdout
        assert stdout is not None
        try:
            line = await stdout.readline()
        except ValueError:  # asyncio's LimitOverrunError, as readline raises it
            raise EOFError(f"the env wrote more than {LINE_LIMIT >> 20} MB on stdout without a newline") from None
        if not line:
            raise EOFError("the env process closed its stdout")
        return line.rstrip(b"\n")

    def stderr_tail(self, max_chars: int = 4000) -> str:
        if self._stderr < 0:
            return ""
        size = os.fstat(self._stderr).st_size
        start = max(0, size - max_chars)
        return self.host.files.with_original_paths(
            self.spec, os.pread(self._stderr, size - start, start).decode("utf-8", errors="replace")
        )

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        """On a copy of the env's folder, once every process of the episode is gone: see local.verify."""
        if not self._agent_stopped:
            if self._env is not None:
                await self.end(self._env, self.marker)
            self._agent_stopped = True
        return await verify_on_a_copy(self, files, command, timeout_s=timeout_s, keep=max_output_chars)

    async def copy_to(self, target: Sandbox) -> None:
        """Its work folder copied into `target`'s: see local.copies."""
        if not isinstance(target, LocalSandbox):
            raise SandboxError(f"a local sandbox copies into another local sandbox, not a {type(target).__name__}")
        await copy_work(self, target)

    async def stop(self, marker: str, pgid: int | None = None) -> None:
        """Without namespaces: kill every process marked with `marker` (as root: of the
        episode's uid), and the process group `pgid`."""
        if pgid is not None:
            kill_group(pgid)
        if self.users is not None:
            for uid in self.users.all():
                await kill_uid(uid)
        else:
            await asyncio.to_thread(kill_marked, marker)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
        try:
            if self._env is not None:
                await self.end(self._env, self.marker)
        finally:
            if self._stderr >= 0:
                os.close(self._stderr)
                self._stderr = -1
            await asyncio.to_thread(unbind_all_under, self.folder)
            await asyncio.to_thread(remove_tree, self.folder)
            if self.users is not None:
                assert self.host.uids is not None  # the uids came from the host's pool
                for uid in self.users.all():
                    self.host.uids.release(uid)

    def _running(self) -> asyncio.subprocess.Process:
        assert self._env is not None
        return self._env.process
