"""The docker provider: each episode in its own hardened container on this machine's engine.

The provider decides which container an episode gets (a warm one, else a cold start) and
which image it runs; the `Engine` (docker.engine) that it shares with its sandboxes and pools
does the engine's work: blocking calls on its threads, removals, and the reaper's labels.
Streams run on the event loop (docker.stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

import docker

from corral.errors import SandboxError
from corral.sandboxes.base import (
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.docker.channel import Channels
from corral.sandboxes.docker.engine import PING_TIMEOUT_S, Engine, container_name, warm_name
from corral.sandboxes.docker.images import ensure_image
from corral.sandboxes.docker.lease import Lease
from corral.sandboxes.docker.sandbox import DockerSandbox
from corral.sandboxes.env_digest import image_tag
from corral.sandboxes.shared.warm_pool import WarmPools

log = logging.getLogger("corral.sandboxes.docker")


class DockerProvider(SandboxProvider):
    """Starts each sandbox as a hardened container; see docker.engine for the reaper."""

    kind = "docker"
    copies = True
    isolated = True
    whole_images = True
    model_channels = True

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, client: docker.DockerClient | None = None):
        self.engine = Engine(instance=instance, client=client)
        self.channels = Channels(self.engine.instance)  # the envs' sockets (docker.channel)
        self._tags: dict[SandboxSpec, str] = {}  # the image each spec runs, fixed when first known
        self._running: set[DockerSandbox] = set()  # handed to episodes, not yet closed
        self._pools: WarmPools[DockerSandbox] = WarmPools(warm_pool, self._start_warm)
        self._lease: Lease | None = None

    @property
    def instance(self) -> str:
        return self.engine.instance

    async def reap_leftovers(self) -> None:
        """Take the instance's lease (ConfigError when a live server holds it), then remove
        every container of this instance: what a killed run of this server left. A server
        without an instance name has a unique one, so nobody else's to reap or to fear."""
        if not self.engine.named:
            return
        self._lease = await Lease.take(self.engine)
        await self.engine.call(self.engine.reap, {"corral.instance": self.engine.instance})
        await asyncio.to_thread(self.channels.reap)

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Build `spec`'s image if the engine lacks it (or check that its prebuilt image is there).

        The tag is fixed here: an env folder edited while serving changes nothing until a restart.
        """
        prepared = await self.engine.call(ensure_image, self.engine.client, spec, progress)
        assert prepared.image is not None  # a container always runs an image
        self._tags[spec] = prepared.image
        return prepared

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started containers ready for each spec (call on the serving loop)."""
        self._pools.start(specs)

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        labels = dict(labels or {})
        sandbox = self._pools.take(spec)
        if sandbox is not None:
            sandbox.claim(labels)
        else:
            sandbox = await self._start(
                spec,
                name=container_name(self.engine.instance, spec.env_name, labels),
                labels={**self.engine.labels, "corral.env": spec.env_name, **labels},
            )
        self._running.add(sandbox)
        return sandbox

    def status(self) -> ProviderStatus:
        return ProviderStatus(
            self.kind, self.isolated, live=len(self._running), warm=self._pools.ready(), warm_dry=self._pools.dry()
        )

    async def check(self) -> None:
        """The engine answers a ping within PING_TIMEOUT_S, or SandboxError says it stopped."""
        try:
            await asyncio.wait_for(self.engine.call(self.engine.api.ping), PING_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - a timeout, a refused socket, an API error: no engine
            raise SandboxError(
                f"the Docker engine did not answer a ping within {PING_TIMEOUT_S:g}s ({type(error).__name__})"
            ) from None

    async def _start_warm(self, spec: SandboxSpec) -> DockerSandbox:
        labels = {**self.engine.labels, "corral.env": spec.env_name, "corral.pool": "warm"}
        return await self._start(spec, name=warm_name(self.engine.instance, spec.env_name), labels=labels)

    async def _start(self, spec: SandboxSpec, *, name: str, labels: dict[str, str]) -> DockerSandbox:
        if spec not in self._tags:  # never prepared: the image of the folder as it is now
            self._tags[spec] = await self.engine.call(image_tag, spec)
        return await DockerSandbox.create(
            self.engine,
            spec,
            self._tags[spec],
            name=name,
            labels=labels,
            on_close=self._running.discard,
            channels=self.channels,
        )

    async def aclose(self) -> None:
        """Remove every container of this run: the pools', the episodes', any stragglers."""
        await self._pools.close()
        await asyncio.gather(*(sandbox.close() for sandbox in list(self._running)))
        if self._lease is not None:
            await self._lease.release()
        await self.engine.close()
        if self._lease is not None or not self.engine.named:  # never the folder of a live server of this name
            await asyncio.to_thread(self.channels.close)
