"""A Harbor task's sandbox as the episode sees it: an MCP server of the agent's tools, run in the
server, in front of the task's container.

The episode speaks to every env the same way (`EnvProcess`: JSON-RPC lines over a sandbox's
stdio). A Harbor task has no env process, so `HostedSandbox` answers those lines itself:
`initialize`, `ping`, `tools/list` (the terminal tools) and `tools/call`, which runs the tool
through the container's exec (`tools.py`). It declares none of corral's hooks: a Harbor task
has no task arguments, one turn and no report; its tests are its verifier. Everything else
(the verifier, closing) goes to the container's sandbox.

The container itself runs KEEPER under docker's init: an idle shell that answers the warm
pool's readiness ping (the only line it is ever sent) and ends the container when the
server's stream closes, as every corral container does.

`HarborProvider` wraps the sandbox provider for a Harbor bundle: it prepares each task's image
(images.py: base-image map, a prebuilt `docker_image`, the Dockerfile), and hands each
episode a `HostedSandbox`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from corral.env import jsonrpc
from corral.errors import ImageError, SandboxError
from corral.sandboxes import (
    CommandResult,
    Prepared,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.base import Progress
from corral.server.harbor.images import ImagePlan
from corral.server.harbor.tools import TOOLS, TerminalTools, call

log = logging.getLogger("corral.server.harbor")

READY_REPLY = '{"jsonrpc":"2.0","id":"corral-warm","result":{}}'  # the warm pool's ping id (warm_pool.PING_ID)
KEEPER = ("/bin/sh", "-c", f"while IFS= read -r line; do printf '%s\\n' '{READY_REPLY}'; done")
SERVER_INFO = {"name": "corral-harbor-terminal", "version": "1"}


class HostedSandbox(Sandbox):
    """The agent's tools, answered in the server, for the task container `inner`."""

    def __init__(self, inner: Sandbox):
        self.inner = inner
        self.tools = TerminalTools(inner)
        self._replies: asyncio.Queue[bytes] = asyncio.Queue()
        self._died: EOFError | None = None

    async def send_line(self, line: bytes) -> None:
        """Answer one request (a tool runs here, within the caller's deadline); its reply waits for read_line."""
        if self._died is not None:
            raise self._died
        try:
            message = jsonrpc.decode(line)
        except jsonrpc.RpcError as error:
            self._replies.put_nowait(jsonrpc.encode(jsonrpc.error(None, error.code, error.message)))
            return
        if "id" not in message:
            return  # a notification (notifications/initialized): nothing to answer
        try:
            reply = jsonrpc.result(message["id"], await self._answer(message.get("method"), message.get("params") or {}))
        except jsonrpc.RpcError as error:
            reply = jsonrpc.error(message["id"], error.code, error.message)
        self._replies.put_nowait(jsonrpc.encode(reply))

    async def read_line(self) -> bytes:
        if self._replies.empty() and self._died is not None:
            raise self._died
        return await self._replies.get()

    async def _answer(self, method: Any, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return {"protocolVersion": jsonrpc.PROTOCOL_VERSION, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": list(TOOLS.values())}
        if method == "tools/call" and isinstance(params.get("name"), str) and isinstance(params.get("arguments", {}), dict):
            return await self._call(params["name"], params.get("arguments") or {})
        if method == "tools/call":
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, 'tools/call takes {"name": str, "arguments": object}')
        raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method}; this env answers "
                               "initialize, ping, tools/list and tools/call")

    async def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            text, failure = await call(self.tools, name, arguments)
        except SandboxError as error:  # the container is gone (its memory limit, say): the episode ends
            await self._die(error)
            raise self._died from None  # type: ignore[misc]
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failure is not None}
        if failure is not None:
            result["_meta"] = {jsonrpc.ERROR_TYPE_META: failure}
        return result

    async def _die(self, error: SandboxError) -> None:
        """Note why the container is gone: the inner sandbox says why its stream ended (its memory limit...)."""
        reason = str(error)
        if not self.inner.alive:
            try:
                await asyncio.wait_for(self.inner.read_line(), 5.0)
            except (EOFError, TimeoutError):
                pass
            reason = self.inner.stderr_tail(1500).strip() or reason
        self._died = EOFError(f"the task's container stopped: {reason}")

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return self.inner.stderr_tail(max_chars)

    async def verify(self, files: Mapping[str, bytes], command: Callable[[str], Sequence[str]], *,
                     timeout_s: float, max_output_chars: int = 20_000, **placement: Any) -> CommandResult:
        return await self.inner.verify(files, command, timeout_s=timeout_s, max_output_chars=max_output_chars,
                                       **placement)

    async def close(self) -> None:
        await self.inner.close()

    @property
    def alive(self) -> bool:
        return self._died is None and self.inner.alive


class HarborProvider(SandboxProvider):
    """`inner`'s sandboxes of a Harbor bundle's tasks, each behind a HostedSandbox; `images`
    says how each task's image is made."""

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
            raise ImageError(f"task {spec.env_name} runs in its own image, as a whole machine, which the "
                             f"{self.inner.kind} sandbox does not run; serve Harbor tasks with --sandbox docker")
        if spec not in self._prepared:
            self._prepared[spec] = await self.images.prepare(self.inner, spec, progress)
        return self._prepared[spec][1]

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        self.inner.start_pools([self._prepared[spec][0] if spec in self._prepared else spec for spec in specs])

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        if spec not in self._prepared:
            await self.prepare(spec)
        return HostedSandbox(await self.inner.start(self._prepared[spec][0], labels))

    def status(self) -> ProviderStatus:
        return self.inner.status()

    async def check(self) -> None:
        await self.inner.check()

    async def aclose(self) -> None:
        await self.inner.aclose()
