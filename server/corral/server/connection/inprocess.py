"""An env whose tools the server answers itself, in its own process (the in-process `EnvConnection`).

Some sandboxes hold no env process: a Harbor task's container runs the task's own image, which
may have no python3, so its terminal tools run from the server through the container's exec
(`harbor/tools.py`). Their calls go straight to that code: nothing is encoded as JSON-RPC and
parsed back. Such an env declares none of corral's hooks (no task arguments, one turn, no
report): its tests, run in the sandbox, are its verifier.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from corral.env import jsonrpc
from corral.errors import SandboxError
from corral.sandboxes import Sandbox
from corral.server.connection.base import EnvDied

READ_EXIT_S = 5.0  # how long a stopped sandbox's stream may take to say why it stopped


class ServedTools(Protocol):
    """Tools the server runs against a sandbox."""

    def schemas(self) -> list[dict[str, Any]]:
        """Each tool's MCP schema (name, description, inputSchema)."""
        ...

    async def run(self, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
        """(the answer, None), or (why it failed, the kind of failure as corral's runtime names
        it: tool_not_found, invalid_args, execution_error). SandboxError when the sandbox is gone."""
        ...


class InProcessConnection:
    """`tools`, answered in this process, for the env of `sandbox`."""

    def __init__(self, sandbox: Sandbox, tools: ServedTools):
        self.sandbox = sandbox
        self.tools = tools
        self._died: EnvDied | None = None
        self._unanswered = 0  # calls given up on (a deadline): their command may still run in the sandbox

    @property
    def idle(self) -> bool:
        return self._unanswered == 0

    async def initialize(self) -> None:
        """Nothing to shake hands with: the tools are this process's own."""

    async def hook(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return None  # it declares no hooks

    async def list_tools(self) -> list[Any]:
        return list(self.tools.schemas())

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The tool's answer as an MCP tools/call result; EnvDied when the sandbox is gone (its
        memory limit, say), and for every call after."""
        if self._died is not None:
            raise self._died
        self._unanswered += 1
        try:
            text, failure = await self.tools.run(name, arguments)
        except SandboxError as error:
            raise await self._die(error) from error
        self._unanswered -= 1
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failure is not None}
        if failure is not None:
            result["_meta"] = {jsonrpc.ERROR_TYPE_META: failure}
        return result

    async def close(self) -> None:
        await self.sandbox.close()

    async def _die(self, error: SandboxError) -> EnvDied:
        """Why the sandbox is gone: a stopped one's stream ends saying why (its memory limit...)."""
        reason = str(error)
        if not self.sandbox.alive:
            with contextlib.suppress(EOFError, TimeoutError):
                await asyncio.wait_for(self.sandbox.read_line(), READ_EXIT_S)
            reason = self.sandbox.stderr_tail(1500).strip() or reason
        self._died = EnvDied(f"the env's sandbox stopped: {reason}")
        return self._died
