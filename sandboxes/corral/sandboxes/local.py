"""The local provider: one child process per episode, on this machine.

The embedded default for laptops and CI. Where bubblewrap runs (local_namespace), each
episode is an isolation boundary for files, processes and the network: its env and all it
starts see no network (loopback included: not corral's own API), their own processes alone,
a fresh root with the system read-only, private /tmp, /var/tmp and /dev/shm, the env's folder
and corral's SDK read-only and its work folder writable; nothing else of this machine's files
(not the bundle's tests, not other episodes); and every process goes with the namespace when
the episode ends. Not isolated even then: the kernel, CPU and memory (no limits), and what
the system's folders and /etc show its user. Where bubblewrap cannot run, an env shares this
machine's network and every file its user may read, so an env whose tools give the agent a
shell (`SandboxSpec.agent_shell`) is refused unless the operator opts out
(`unsafe_local_shell`). Either way:

- Each episode gets a folder of its own under the instance's root,
  `$TMPDIR/corral-<instance>/<env>-<id>/` (the root made or checked by runtime_dirs), and its
  env runs in `work/` there (also its HOME) with a minimal environment: PATH, LANG, the
  PYTHONPATH the SDK needs, and a marker (`CORRAL_SANDBOX`, see local_procs); never the
  server's own variables (CORRAL_TOKEN...).
- A server running as root runs each episode's env as a uid of its own (local_procs), whose
  folder (mode 0700) no other episode can read; bwrap runs as that uid. A server running as
  another user runs every env as itself.
- A server running as root mounts a tmpfs of the env's share (`scratch_mb` per writable
  folder) over its work folder, as docker mounts its writable folders: the kernel refuses a
  write past it, and this machine's disk is out of the agent's reach. Another user cannot
  (local_quota says what is left uncovered then). Either way no file the env or the agent's
  processes write may pass that size (RLIMIT_FSIZE): the env's stderr, a file of the
  server's on this machine's disk that a tool's error message grows, among them.
- When the episode ends, or before its command verifiers run, every process of the episode
  goes: its namespace; without one, its process group and every process carrying its marker
  (or, as root, its uid). Command verifiers run on a copy, in fresh namespaces (local_verify).
- A server holds its instance's root with a lock while it serves; a second server of the same
  instance refuses, and a restarted one removes what a killed one left (`reap_leftovers`).
- With a warm pool (`warm_pool`), started envs that have answered `ping` wait for their
  episode (warm_pool), as docker's containers do: a reset skips the interpreter's start.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from corral.errors import ConfigError, SandboxError
from corral.sandboxes import local_procs
from corral.sandboxes.base import (
    CommandResult,
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.local_files import EnvFiles
from corral.sandboxes.local_namespace import Bubblewrap, Contained, find_bubblewrap
from corral.sandboxes.local_procs import (
    UidPool,
    as_uid,
    kill_group,
    kill_marked,
    kill_uid,
    minimal_environment,
)
from corral.sandboxes.local_quota import Quotas, file_size_limit, unbind_all_under
from corral.sandboxes.local_verify import verify_on_a_copy
from corral.sandboxes.runtime_dirs import private_folder, safe_name
from corral.sandboxes.trees import remove_tree
from corral.sandboxes.warm_pool import WarmPools

log = logging.getLogger("corral.sandboxes")

LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result
PROBE_UID = 65534  # a server running as root probes bwrap as a user without privileges, as its envs run


class LocalSandbox(Sandbox):
    """One episode's env process, in `folder/work`, as `uid` (None: the server's own user)."""

    def __init__(self, provider: LocalProvider, spec: SandboxSpec, folder: Path, uid: int | None):
        self.provider = provider
        self.spec = spec
        self.folder = folder  # the server's: the env's stderr, the verifiers' copies
        self.workdir = folder / "work"  # the env's working directory and HOME
        self.uid = uid
        self.marker = f"{provider.instance}/{folder.name}/"  # every process of the episode starts with it
        self.verifications = 0
        self._env: Contained | None = None  # the env's process, in namespaces where bwrap runs
        self._stderr = -1
        self._agent_stopped = False
        self._closed = False

    async def launch(self) -> None:
        """Make the episode's folders and start its env; raise SandboxError when it cannot start."""
        spec, contained = self.spec, self.provider.bubblewrap is not None
        tmp, stderr_path = self.folder / "tmp", self.folder / "stderr"
        try:
            # As root, 0711: the episode's uid may pass through to its own folders, and list none.
            self.folder.mkdir(mode=0o711 if self.uid is not None else 0o700)
            self.own(self.workdir)
            quotas = self.provider.quotas
            quotas.bound(self.workdir, self.share_mb, uid=self.uid)
            if not contained:  # in namespaces, /tmp is a tmpfs of the episode's own
                self.own(tmp)
                quotas.bound(tmp, spec.scratch_mb, uid=self.uid)
            # The env writes it, the server reads it by position through the same descriptor:
            # the env cannot swap the file for a link to a secret.
            self._stderr = os.open(stderr_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise SandboxError(f"could not make the folders of an episode of env {spec.env_name} in "
                               f"{self.provider.root}: {error}") from None
        environ = minimal_environment(self.workdir, Path("/tmp") if contained else tmp, self.marker + "env")
        environ.update(PYTHONPATH=os.pathsep.join(str(path) for path in self.provider.files.import_path(spec)),
                       PYTHONUNBUFFERED="1")
        try:
            self._env = await self.spawn(spec.command, cwd=self.workdir, environ=environ,
                                         read_only=self.provider.files.visible(spec), writable=[self.workdir],
                                         stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                         stderr=self._stderr, limit=LINE_LIMIT, as_pid_1=True,
                                         limits=file_size_limit(self.share_mb))
        except OSError as error:
            as_whom = (f" as uid {self.uid} (a server running as root runs each env as its own user: the bundle, "
                       "corral and the command must be readable by every user)") if self.uid is not None else ""
            raise SandboxError(f"could not start {spec.command[0]!r} for env {spec.env_name}{as_whom}: {error}") from None

    async def spawn(self, command: Sequence[str], *, cwd: Path, environ: dict[str, str], read_only: Sequence[Path] = (),
                    writable: Sequence[Path] = (), as_pid_1: bool = False, limits: Sequence[str] = (),
                    **popen) -> Contained:
        """`command` as the episode's user: where bwrap runs, in namespaces of its own that see
        the system, `read_only` and `writable` alone (local_namespace; `as_pid_1`: as their
        first process); else in a process group of its own. `limits` prefixes it (file_size_limit);
        `popen` goes to create_subprocess_exec. OSError when it cannot start."""
        bubblewrap = self.provider.bubblewrap
        if bubblewrap is not None:
            return await Contained.start(bubblewrap, self.uid, command, cwd=cwd, read_only=read_only,
                                         writable=writable, tmp_mb=self.spec.scratch_mb,
                                         network=self.spec.network == "egress", as_pid_1=as_pid_1, limits=limits,
                                         env=environ, **popen)
        process = await asyncio.create_subprocess_exec(*limits, *as_uid(self.uid, command), cwd=cwd, env=environ,
                                                       start_new_session=True, **popen)
        return Contained(process, None)

    async def end(self, started: Contained, marker: str) -> None:
        """End `started` and every process it started: its namespaces, else every process of
        the episode marked `marker` (as root: of the episode's uid) and its process group."""
        if self.provider.bubblewrap is not None:
            await started.end()
        else:
            await self.stop(marker, pgid=started.process.pid)
            await started.process.wait()

    @property
    def share_mb(self) -> int:
        """What the env may keep in its work folder: `scratch_mb` for each writable folder, as
        docker allows."""
        return self.spec.scratch_mb * max(1, len(self.spec.writable))

    @property
    def quotas(self) -> Quotas:
        return self.provider.quotas

    @property
    def alive(self) -> bool:
        return not self._closed and self._env is not None and self._env.process.returncode is None

    def own(self, path: Path, mode: int = 0o700) -> None:
        """Make `path` a folder of the episode's user."""
        path.mkdir(mode=mode)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

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
        return self.provider.files.with_original_paths(
            self.spec, os.pread(self._stderr, size - start, start).decode("utf-8", errors="replace"))

    async def verify(self, files: Mapping[str, bytes], command: Callable[[str], Sequence[str]], *,
                     timeout_s: float, max_output_chars: int = 20_000) -> CommandResult:
        """On a copy of the env's folder, once every process of the episode is gone: see local_verify."""
        if not self._agent_stopped:
            if self._env is not None:
                await self.end(self._env, self.marker)
            self._agent_stopped = True
        return await verify_on_a_copy(self, files, command, timeout_s=timeout_s, keep=max_output_chars)

    async def stop(self, marker: str, pgid: int | None = None) -> None:
        """Without namespaces: kill every process marked with `marker` (as root: of the
        episode's uid), and the process group `pgid`."""
        if pgid is not None:
            kill_group(pgid)
        if self.uid is not None:
            await kill_uid(self.uid)
        else:
            await asyncio.to_thread(kill_marked, marker)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.provider.running.discard(self)
        self.provider.waiting.discard(self)
        try:
            if self._env is not None:
                await self.end(self._env, self.marker)
        finally:
            if self._stderr >= 0:
                os.close(self._stderr)
                self._stderr = -1
            await asyncio.to_thread(unbind_all_under, self.folder)
            await asyncio.to_thread(remove_tree, self.folder)
            if self.uid is not None:
                assert self.provider.uids is not None  # the uid came from the provider's pool
                self.provider.uids.release(self.uid)

    def _running(self) -> asyncio.subprocess.Process:
        assert self._env is not None
        return self._env.process


class LocalProvider(SandboxProvider):
    """Runs each episode's env as a child process in a fresh folder (see the module docstring)."""

    kind = "local"

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, unsafe_local_shell: bool = False) -> None:
        # Without a name (a one-off `corral check`), a unique one: it must never reap a server's.
        self.named = instance is not None
        self.instance = safe_name(instance or f"once-{uuid.uuid4().hex[:8]}")
        self.root = Path(tempfile.gettempdir()) / f"corral-{self.instance}"
        self.uids = UidPool() if local_procs.running_as_root() else None
        found = find_bubblewrap(PROBE_UID if self.uids is not None else None)  # as the envs will run it
        self.bubblewrap = found if isinstance(found, Bubblewrap) else None
        self.why_not_isolated = found if isinstance(found, str) else ""
        self.isolated = self.bubblewrap is not None
        self.unsafe_local_shell = unsafe_local_shell
        self.running: set[LocalSandbox] = set()
        self._pools: WarmPools[LocalSandbox] = WarmPools(warm_pool, self._start_warm)
        self.waiting: set[LocalSandbox] = set()  # started for a pool, not yet taken: not live
        self.files = EnvFiles()  # as root: copies of the env's folder and the SDK, readable by all
        self.quotas = Quotas(enabled=self.uids is not None)
        self._root_made = False
        self._lock = -1

    async def reap_leftovers(self) -> None:
        """Lock the instance's root (ConfigError when a live server holds it), then end every
        process and remove every folder a killed server of this instance left."""
        await asyncio.to_thread(self._claim_and_reap)

    def _claim_and_reap(self) -> None:
        self._make_root()
        lock = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            raise ConfigError(
                f"another corral server holds the instance {self.instance!r} on this machine (it locks "
                f"{self.root / 'lock'}); stop that server, or serve this one with --instance OTHER_NAME "
                "(or CORRAL_INSTANCE)") from None
        self._lock = lock
        killed = kill_marked(f"{self.instance}/")
        unbind_all_under(self.root)
        left = [entry for entry in self.root.iterdir() if entry.name != "lock"]
        for entry in left:
            remove_tree(entry)
        self.files.copies.clear()
        if killed or left:
            log.info("removed what a killed server of instance %s left: %d process(es), %d folder(s)",
                     self.instance, killed, len(left))

    def _make_root(self) -> None:
        # As root, 0711: each env's uid may pass through to its own folder, and list none.
        private_folder(self.root, 0o711 if self.uids is not None else 0o700)
        self._root_made = True

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Refuse an env that gives the agent a shell where it would not be contained (below).
        As root: copy the env's folder and corral's SDK where every env's uid can read them
        (the originals may sit in a folder of root's, as pytest's and pyenv's do); an edit
        takes effect on restart, as with docker's images. Otherwise nothing: the env imports
        its folder as it is."""
        began = time.monotonic()
        self._refuse_uncontained_shell(spec)
        if self.uids is not None and spec not in self.files.copies:
            await asyncio.to_thread(self._copy_readable, spec)
        return Prepared(spec.env_name, image=None, built=False, seconds=time.monotonic() - began)

    def _refuse_uncontained_shell(self, spec: SandboxSpec) -> None:
        """ConfigError for an env whose tools give the agent a shell or files (`agent_shell`)
        when its processes would share this machine's files and network: bwrap cannot run, or
        the env asks for egress (which shares loopback too); unless the operator said so."""
        if not spec.agent_shell or self.unsafe_local_shell:
            return
        if self.bubblewrap is None:
            why = f"the local sandbox cannot isolate it here: {self.why_not_isolated}"
            fix = "install bubblewrap (apt-get install bubblewrap)"
        elif spec.network == "egress":
            why = "it asks for network egress, which a local env shares with this machine, loopback included"
            fix = "set network = \"none\" in its env.toml"
        else:
            return
        raise ConfigError(f"env {spec.env_name} gives the agent a shell or files (agent_shell in its env.toml) and "
                          f"{why}; {fix}, serve with --sandbox docker, or accept the risk with --unsafe-local-shell")

    def _copy_readable(self, spec: SandboxSpec) -> None:
        self._make_root()
        self.files.copy_readable(spec, self.root / "shared")

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started envs ready for each spec (call on the serving loop)."""
        self._pools.start(specs)

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        # `labels` are dropped: a child process has nowhere to carry them.
        sandbox = self._pools.take(spec)
        if sandbox is not None:
            self.waiting.discard(sandbox)
            return sandbox
        return await self._start(spec)

    async def _start_warm(self, spec: SandboxSpec) -> LocalSandbox:
        sandbox = await self._start(spec)
        self.waiting.add(sandbox)
        return sandbox

    async def _start(self, spec: SandboxSpec) -> LocalSandbox:
        if not self._root_made:  # a provider used on its own, without reap_leftovers (a library, a test)
            await asyncio.to_thread(self._make_root)
        await self.prepare(spec)
        uid = await self.uids.take() if self.uids is not None else None
        sandbox = LocalSandbox(self, spec, self.root / f"{spec.env_name}-{uuid.uuid4().hex[:12]}", uid)
        self.running.add(sandbox)
        try:
            await sandbox.launch()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def status(self) -> ProviderStatus:
        return ProviderStatus(self.kind, self.isolated, live=len(self.running - self.waiting), warm=self._pools.ready(),
                              warm_dry=self._pools.dry())

    async def aclose(self) -> None:
        await self._pools.close()
        await asyncio.gather(*(sandbox.close() for sandbox in list(self.running)))
        if self._lock >= 0 or not self.named:  # never the root of a live server of the same name
            await asyncio.to_thread(unbind_all_under, self.root)
            await asyncio.to_thread(remove_tree, self.root)
        if self._lock >= 0:
            os.close(self._lock)  # after the folder is gone: a server starting now finds nothing to reap
            self._lock = -1
