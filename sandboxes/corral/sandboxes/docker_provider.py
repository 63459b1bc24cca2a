"""The docker provider: each episode in its own hardened container on this machine's engine.

Blocking engine calls (create, start, remove, exec) run in a thread pool of their own, sized
for hundreds of episodes starting at once; streams run on the event loop (docker_stream).

Every container carries labels naming its server instance (`corral.instance`, stable across
restarts of one server, e.g. `host-8000`) and run (`corral.run`, new each start). The reaper:
a starting server removes every container of its instance (what a killed run left), a
stopping one removes its run's, and closing a sandbox force-removes its container at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors

from corral.sandboxes.base import Sandbox, SandboxError, SandboxProvider, SandboxSpec
from corral.sandboxes.docker_images import (
    BuildResult,
    EnvImage,
    Progress,
    ensure_image,
    image_exists,
)
from corral.sandboxes.docker_pool import WarmPool
from corral.sandboxes.docker_sandbox import (
    ContainerSettings,
    DockerSandbox,
    container_name,
    remove_container,
    warm_name,
)

log = logging.getLogger("corral.sandboxes.docker")
T = TypeVar("T")

ENGINE_THREADS = 128
ENGINE_TIMEOUT_S = 600  # a build step may stay silent for minutes
PING_TIMEOUT_S = 2.0
REAP_THREADS = 16


@dataclass(frozen=True)
class DockerEnv:
    """An env as the docker provider runs it: where its image comes from, and its filesystem."""

    image: EnvImage
    writable: tuple[str, ...] = ()
    scratch_mb: int = 64


def engine(timeout: float = ENGINE_TIMEOUT_S) -> docker.DockerClient:
    """A client of the engine DOCKER_HOST names (else the local socket), pooled for many threads."""
    return docker.from_env(timeout=timeout, max_pool_size=ENGINE_THREADS)


def engine_answers() -> bool:
    """Whether a Docker engine answers a ping within PING_TIMEOUT_S."""
    try:
        client = docker.from_env(timeout=PING_TIMEOUT_S)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure means: no engine to use
        return False
    finally:
        client.close()


class DockerProvider(SandboxProvider):
    """Starts each sandbox as a hardened container; see the module docstring for the reaper."""

    name = "docker"
    isolated = True

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, client: docker.DockerClient | None = None):
        self.client = client or engine()
        # Without a name (a one-off `corral check`), a unique one: it must never reap a server's.
        self.instance = instance or f"{socket.gethostname()}-once-{uuid.uuid4().hex[:8]}"
        self.run_id = uuid.uuid4().hex[:12]
        self.warm_pool = warm_pool
        self._executor = ThreadPoolExecutor(ENGINE_THREADS, thread_name_prefix="corral-docker")
        self._settings: dict[Path, ContainerSettings] = {}  # per env folder
        self._running: set[DockerSandbox] = set()
        self._removals: set[Future] = set()
        self._removals_lock = threading.Lock()
        self._pools: dict[tuple, WarmPool] = {}

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking engine call on the provider's own threads."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    @property
    def labels(self) -> dict[str, str]:
        return {"corral.instance": self.instance, "corral.run": self.run_id}

    async def prepare(self, envs: Iterable[DockerEnv], progress: Progress = log.info) -> list[BuildResult]:
        """Reap what a killed run of this instance left, then build the images that are missing."""
        await self.call(self.reap, {"corral.instance": self.instance})
        results = []
        for env in envs:
            result = await self.call(ensure_image, self.client, env.image, progress)
            # The tag is fixed here: an env folder edited while serving changes nothing until a restart.
            self._settings[env.image.context_dir.resolve()] = ContainerSettings(
                image=result.tag, writable=env.writable, scratch_mb=env.scratch_mb
            )
            results.append(result)
        return results

    def has_image(self, tag: str) -> bool:
        """Whether the engine has image `tag` (blocking)."""
        return image_exists(self.client, tag)

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started containers ready for each spec's env (call on the serving loop)."""
        if self.warm_pool < 1:
            return
        for spec in specs:
            key = _pool_key(spec)
            if key not in self._pools:
                self._pools[key] = WarmPool(spec.env_name, self.warm_pool, functools.partial(self._start_warm, spec))

    def pool_sizes(self) -> dict[str, int]:
        """Warm containers ready now, per env."""
        return {pool.env_name: pool.ready for pool in self._pools.values()}

    async def start(self, spec: SandboxSpec) -> Sandbox:
        pool = self._pools.get(_pool_key(spec))
        sandbox = pool.take() if pool is not None else None
        if sandbox is not None:
            sandbox.claim(spec.labels)
            return sandbox
        labels = {**self.labels, "corral.env": spec.env_name, **spec.labels}
        return await self._start(spec, name=container_name(self.instance, spec.env_name, spec.labels), labels=labels)

    async def _start_warm(self, spec: SandboxSpec) -> DockerSandbox:
        labels = {**self.labels, "corral.env": spec.env_name, "corral.pool": "warm"}
        return await self._start(spec, name=warm_name(self.instance, spec.env_name), labels=labels)

    async def _start(self, spec: SandboxSpec, *, name: str, labels: dict[str, str]) -> DockerSandbox:
        context = spec.context_dir.resolve()
        if context not in self._settings:  # not prepared: the folder's own Dockerfile, defaults
            tag = await self.call(lambda: EnvImage(spec.env_name, context).tag)
            self._settings[context] = ContainerSettings(image=tag)
        settings = self._settings[context]
        sandbox = await DockerSandbox.create(self, spec, settings, name=name, labels=labels)
        self._running.add(sandbox)
        return sandbox

    def forget(self, sandbox: DockerSandbox) -> None:
        self._running.discard(sandbox)

    def remove(self, container: str, name: str) -> None:
        """Start force-removing `container` (an id or name) on the engine threads at once, so
        no cancelled caller can stop it; `aclose` waits for every removal started."""
        removal = self._executor.submit(remove_container, self.client.api, container)
        with self._removals_lock:  # the callback runs on an engine thread
            self._removals.add(removal)

        def done(future: Future) -> None:
            with self._removals_lock:
                self._removals.discard(future)
            if future.exception() is not None:
                log.warning("could not remove container %s: %s", name, future.exception())

        removal.add_done_callback(done)

    def reap(self, labels: dict[str, str]) -> int:
        """Force-remove every container carrying all of `labels` (blocking); how many went."""
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        found = self.client.api.containers(all=True, filters=filters)
        with ThreadPoolExecutor(REAP_THREADS, thread_name_prefix="corral-reap") as threads:
            failures = [f for f in threads.map(self._try_remove, found) if f]
        if failures:
            raise SandboxError(f"could not remove {len(failures)} container(s): {failures[0]}")
        removed = len(found)
        if removed:
            log.info("removed %d container(s) labelled %s", removed, labels)
        return removed

    def _try_remove(self, container: dict) -> str | None:
        try:
            remove_container(self.client.api, container["Id"])
        except docker.errors.APIError as error:
            return f"{container['Names'][0]}: {error}"
        return None

    async def aclose(self) -> None:
        """Remove every container of this run: the pools', the episodes', any stragglers."""
        await asyncio.gather(*(pool.close() for pool in self._pools.values()))
        self._pools.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in list(self._running)))
        with self._removals_lock:
            removals = list(self._removals)
        await asyncio.gather(*(asyncio.wrap_future(removal) for removal in removals), return_exceptions=True)
        await self.call(self.reap, self.labels)
        self._executor.shutdown(wait=False)
        self.client.close()


def _pool_key(spec: SandboxSpec) -> tuple:
    return (spec.env_name, spec.context_dir.resolve(), spec.command, spec.resources, spec.network)
