"""A Harbor task's env as the episode sees it: the agent's tools, answered in the server, in
front of the task's container.

A Harbor task has no env process: its image may have no python3, and corral's code in it would
change what the task tests. So its episodes speak to it through the in-process connection
(`env_inprocess.InProcessConnection`), whose tools are the terminal tools (`tools.py`), each
run through the container's exec. It declares none of corral's hooks: a Harbor task has no task
arguments, one turn and no report; its tests are its verifier, run in the container's sandbox.

The container itself runs KEEPER under docker's init: an idle shell that answers the warm
pool's readiness ping (the only line it is ever sent) and ends the container when the
server's stream closes, as every corral container does.

`HarborProvider` wraps the sandbox provider for a Harbor bundle: it prepares each task's image
(images.py: base-image map, a prebuilt `docker_image`, the Dockerfile).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from corral.errors import ImageError
from corral.sandboxes import Prepared, ProviderStatus, Sandbox, SandboxProvider, SandboxSpec
from corral.sandboxes.base import Progress
from corral.server.connection.inprocess import InProcessConnection
from corral.server.harbor.images import ImagePlan
from corral.server.harbor.tools import TOOLS, TerminalTools, call

log = logging.getLogger("corral.server.harbor")

READY_REPLY = '{"jsonrpc":"2.0","id":"corral-warm","result":{}}'  # the warm pool's ping id (warm_pool.PING_ID)
KEEPER = ("/bin/sh", "-c", f"while IFS= read -r line; do printf '%s\\n' '{READY_REPLY}'; done")


class HostedTools:
    """The terminal tools of one task's container, as the in-process connection runs them."""

    def __init__(self, sandbox: Sandbox):
        self.terminal = TerminalTools(sandbox)

    def schemas(self) -> list[dict[str, Any]]:
        return list(TOOLS.values())

    async def run(self, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
        return await call(self.terminal, name, arguments)


def connect(sandbox: Sandbox) -> InProcessConnection:
    """The env of a Harbor task's container `sandbox`: its terminal tools, answered in the server."""
    return InProcessConnection(sandbox, HostedTools(sandbox))


class HarborProvider(SandboxProvider):
    """`inner`'s sandboxes of a Harbor bundle's tasks, each of its task's image; `images` says
    how each task's image is made."""

    def __init__(self, inner: SandboxProvider, images: ImagePlan):
        self.inner = inner
        self.images = images
        self.kind, self.isolated, self.whole_images = inner.kind, inner.isolated, inner.whole_images
        self._prepared: dict[SandboxSpec, tuple[SandboxSpec, Prepared]] = {}  # a task's spec -> the one its image
        # was made from, and how

    async def reap_leftovers(self) -> None:
        await self.inner.reap_leftovers()

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """The task's image, made as ImagePlan says; ImageError when it cannot be, and when the
        provider does not run an image whole (a Harbor task's environment is its image)."""
        if not self.inner.whole_images:
            raise ImageError(
                f"task {spec.env_name} runs in its own image, as a whole machine, which the "
                f"{self.inner.kind} sandbox does not run; serve Harbor tasks with --sandbox docker"
            )
        if spec not in self._prepared:
            self._prepared[spec] = await self.images.prepare(self.inner, spec, progress)
        return self._prepared[spec][1]

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        self.inner.start_pools([self._prepared[spec][0] if spec in self._prepared else spec for spec in specs])

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        if spec not in self._prepared:
            await self.prepare(spec)
        return await self.inner.start(self._prepared[spec][0], labels)

    def status(self) -> ProviderStatus:
        return self.inner.status()

    async def check(self) -> None:
        await self.inner.check()

    async def aclose(self) -> None:
        await self.inner.aclose()
