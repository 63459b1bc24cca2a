"""The docker provider: each episode in its own hardened container on this machine's engine.

The provider decides which container an episode gets (a warm one, else a cold start) and
which image it runs; the `Engine` (docker_engine) that it shares with its sandboxes and pools
does the engine's work: blocking calls on its threads, removals, and the reaper's labels.
Streams run on the event loop (docker_stream).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Mapping

import docker

from corral.sandboxes.base import (
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.docker_engine import Engine
from corral.sandboxes.docker_images import ensure_image, image_tag
from corral.sandboxes.docker_lease import Lease
from corral.sandboxes.docker_pool import WarmPool
from corral.sandboxes.docker_sandbox import DockerSandbox, container_name, warm_name

log = logging.getLogger("corral.sandboxes.docker")


class DockerProvider(SandboxProvider):
    """Starts each sandbox as a hardened container; see docker_engine for the reaper."""

    kind = "docker"
    isolated = True

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, client: docker.DockerClient | None = None):
        self.engine = Engine(instance=instance, client=client)
        self.warm_pool = warm_pool
        self._tags: dict[SandboxSpec, str] = {}  # the image each spec runs, fixed when first known
        self._running: set[DockerSandbox] = set()  # handed to episodes, not yet closed
        self._pools: dict[SandboxSpec, WarmPool] = {}
        self._lease: Lease | None = None

    async def reap_leftovers(self) -> None:
        """Take the instance's lease (ConfigError when a live server holds it), then remove
        every container of this instance: what a killed run of this server left. A server
        without an instance name has a unique one, so nobody else's to reap or to fear."""
        if not self.engine.named:
            return
        self._lease = await Lease.take(self.engine)
        await self.engine.call(self.engine.reap, {"corral.instance": self.engine.instance})

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Build `spec`'s image if the engine lacks it (or check that its prebuilt image is there).

        The tag is fixed here: an env folder edited while serving changes nothing until a restart.
        """
        prepared = await self.engine.call(ensure_image, self.engine.client, spec, progress)
        self._tags[spec] = prepared.image
        return prepared

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started containers ready for each spec (call on the serving loop)."""
        if self.warm_pool < 1:
            return
        for spec in specs:
            if spec not in self._pools:
                self._pools[spec] = WarmPool(spec.env_name, self.warm_pool, functools.partial(self._start_warm, spec))

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        labels = dict(labels or {})
        pool = self._pools.get(spec)
        sandbox = pool.take() if pool is not None else None
        if sandbox is not None:
            sandbox.claim(labels)
        else:
            sandbox = await self._start(
                spec, name=container_name(self.engine.instance, spec.env_name, labels),
                labels={**self.engine.labels, "corral.env": spec.env_name, **labels},
            )
        self._running.add(sandbox)
        return sandbox

    def status(self) -> ProviderStatus:
        warm: dict[str, int] = {}
        for pool in self._pools.values():
            warm[pool.env_name] = warm.get(pool.env_name, 0) + pool.ready
        return ProviderStatus(self.kind, self.isolated, live=len(self._running), warm=warm)

    async def _start_warm(self, spec: SandboxSpec) -> DockerSandbox:
        labels = {**self.engine.labels, "corral.env": spec.env_name, "corral.pool": "warm"}
        return await self._start(spec, name=warm_name(self.engine.instance, spec.env_name), labels=labels)

    async def _start(self, spec: SandboxSpec, *, name: str, labels: dict[str, str]) -> DockerSandbox:
        if spec not in self._tags:  # never prepared: the image of the folder as it is now
            self._tags[spec] = await self.engine.call(image_tag, spec)
        return await DockerSandbox.create(
            self.engine, spec, self._tags[spec], name=name, labels=labels, on_close=self._running.discard
        )

    async def aclose(self) -> None:
        """Remove every container of this run: the pools', the episodes', any stragglers."""
        await asyncio.gather(*(pool.close() for pool in self._pools.values()))
        self._pools.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in list(self._running)))
        if self._lease is not None:
            await self._lease.release()
        await self.engine.close()
