"""The local provider: one child process per episode, on this machine.

The embedded default for laptops and CI. Where bubblewrap runs (local.namespace), each
episode is an isolation boundary for files, processes and the network: its env and all it
starts see no network (loopback included: not corral's own API), their own processes alone,
a fresh root with the system read-only, private /tmp, /var/tmp and /dev/shm, the env's folder
and corral's SDK read-only and its work folder writable; nothing else of this machine's files
(not the bundle's tests, not other episodes); and every process goes with the namespace when
the episode ends, and a seccomp filter refuses the kernel calls docker's profile refuses
(local.seccomp). Not isolated even then: the kernel, CPU (no limit), memory summed over the
episode's processes (each process maps at most the env's `memory_mb`: local.quota), and what
the system's folders and /etc show its user. Where bubblewrap cannot run, an env shares this
machine's network and every file its user may read, so an env whose tools give the agent a
shell (`SandboxSpec.agent_shell`) is refused unless the operator opts out
(`unsafe_local_shell`). Either way:

- Each episode gets a folder of its own under the instance's root,
  `$TMPDIR/corral-<instance>/<env>-<id>/` (the root made or checked by runtime_dirs), and its
  env runs in `work/` there (also its HOME) with a minimal environment: PATH, LANG, the
  PYTHONPATH the SDK needs, and a marker (`CORRAL_SANDBOX`, see local.procs); never the
  server's own variables (CORRAL_TOKEN...).
- A server running as root runs each episode's env as a uid of its own (local.procs), whose
  folder (mode 0700) no other episode can read; bwrap runs as that uid. Where bwrap runs and
  the env is corral's runtime (`python3 -m corral.env`), three uids of its own instead, as in
  a docker container: bwrap, run as root, starts the env as root with only the capabilities
  to change users and to signal, corral's runtime takes the env's uid, the agent's processes
  run as the agent's (corral.env.agent) with none and cannot signal, trace, read or write the
  env, and the verifier runs as the third (local.verify). The work folder is the agent's.
  A server running as another user runs every env, its agent and its verifier as itself.
- A server running as root mounts a tmpfs of the env's share (`scratch_mb` per writable
  folder) over its work folder, as docker mounts its writable folders: the kernel refuses a
  write past it, and this machine's disk is out of the agent's reach. Another user cannot
  (local.quota says what is left uncovered then). Either way no file the env or the agent's
  processes write may pass that size (RLIMIT_FSIZE): the env's stderr, a file of the
  server's on this machine's disk that a tool's error message grows, among them.
- When the episode ends, or before its command verifiers run, every process of the episode
  goes: its namespace; without one, its process group and every process carrying its marker
  (or, as root, its uid). Command verifiers run on a copy, in fresh namespaces (local.verify).
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
from collections.abc import Iterable, Mapping
from pathlib import Path

from corral.errors import ConfigError
from corral.sandboxes.base import (
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.local import procs as local_procs
from corral.sandboxes.local.files import EnvFiles
from corral.sandboxes.local.namespace import Bubblewrap, find_bubblewrap, refusal
from corral.sandboxes.local.procs import UidPool, Users, kill_marked
from corral.sandboxes.local.quota import Quotas, unbind_all_under
from corral.sandboxes.local.sandbox import ENV_CAPABILITIES, LocalSandbox
from corral.sandboxes.runtime_dirs import private_folder, safe_name
from corral.sandboxes.shared.bootstrap import bootstrapped
from corral.sandboxes.shared.live_sandboxes import LiveSandboxes
from corral.sandboxes.shared.trees import remove_tree

log = logging.getLogger("corral.sandboxes")

PROBE_UID = 65534  # a server running as root probes bwrap as a user without privileges, as its envs run


class LocalProvider(SandboxProvider):
    """Runs each episode's env as a child process in a fresh folder (see the module docstring)."""

    kind = "local"
    model_channels = True
    copies = True

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
        self.apart = self.uids is not None and self.bubblewrap is not None and self._can_start_as_root(self.bubblewrap)
        self.unsafe_local_shell = unsafe_local_shell
        self._live: LiveSandboxes[LocalSandbox] = LiveSandboxes(warm_pool, self._start)
        self.files = EnvFiles()  # as root: copies of the env's folder and the SDK, readable by all
        self.quotas = Quotas(enabled=self.uids is not None)
        self._root_made = False
        self._lock = -1

    @staticmethod
    def _can_start_as_root(bubblewrap: Bubblewrap) -> bool:
        """Whether bwrap can start an env as root holding only the capabilities to change users
        (a root without CAP_SYS_ADMIN, in a container, cannot); if not, one uid per episode."""
        if why := refusal(bubblewrap, None, ENV_CAPABILITIES):
            log.warning(
                "bubblewrap cannot start a local env as root here (%s): each episode's env, agent and "
                "verifier share one uid",
                why,
            )
            return False
        return True

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
                "(or CORRAL_INSTANCE)"
            ) from None
        self._lock = lock
        killed = kill_marked(f"{self.instance}/")
        unbind_all_under(self.root)
        left = [entry for entry in self.root.iterdir() if entry.name != "lock"]
        for entry in left:
            remove_tree(entry)
        self.files.copies.clear()
        if killed or left:
            log.info(
                "removed what a killed server of instance %s left: %d process(es), %d folder(s)",
                self.instance,
                killed,
                len(left),
            )

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
            fix = 'set network = "none" in its env.toml'
        else:
            return
        raise ConfigError(
            f"env {spec.env_name} gives the agent a shell or files (agent_shell in its env.toml) and "
            f"{why}; {fix}, serve with --sandbox docker, or accept the risk with --unsafe-local-shell"
        )

    def _copy_readable(self, spec: SandboxSpec) -> None:
        self._make_root()
        self.files.copy_readable(spec, self.root / "shared")

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started envs ready for each spec (call on the serving loop)."""
        self._live.pools.start(specs)

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        # `labels` are dropped: a child process has nowhere to carry them.
        if (sandbox := self._live.take(spec)) is not None:
            return sandbox
        return await self._start(spec)

    async def _start(self, spec: SandboxSpec) -> LocalSandbox:
        if not self._root_made:  # a provider used on its own, without reap_leftovers (a library, a test)
            await asyncio.to_thread(self._make_root)
        await self.prepare(spec)
        sandbox = LocalSandbox(
            self, spec, self.root / f"{spec.env_name}-{uuid.uuid4().hex[:12]}", on_close=self._live.closed
        )
        self._live.add(sandbox)
        try:
            sandbox.users = await self._users(spec)
            await sandbox.launch()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _users(self, spec: SandboxSpec) -> Users | None:
        """As root, an episode's uids (module docstring): three where its env is corral's
        runtime (which takes on its users) in namespaces, else one for all; None otherwise."""
        if self.uids is None:
            return None
        taken: list[int] = []
        try:
            for _ in range(3 if self.apart and bootstrapped(spec.command) is not None else 1):
                taken.append(await self.uids.take())
        except BaseException:
            for uid in taken:
                self.uids.release(uid)
            raise
        return Users(*taken) if len(taken) == 3 else Users(taken[0], taken[0], taken[0])

    def status(self) -> ProviderStatus:
        return self._live.status(self.kind, self.isolated)

    async def aclose(self) -> None:
        await self._live.close()
        if self._lock >= 0 or not self.named:  # never the root of a live server of the same name
            await asyncio.to_thread(unbind_all_under, self.root)
            await asyncio.to_thread(remove_tree, self.root)
        if self._lock >= 0:
            os.close(self._lock)  # after the folder is gone: a server starting now finds nothing to reap
            self._lock = -1
