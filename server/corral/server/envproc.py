"""Speaking to an env process over its sandbox's stdio: newline-delimited JSON-RPC 2.0.

The env side is `corral.env.runtime` (or any MCP stdio server). Calls are sequential within
an episode, but replies are matched by id, so a late reply to an abandoned call is dropped.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from corral.sandboxes import Sandbox


class EnvDied(RuntimeError):
    """The env process closed its stream: it crashed, exited, or was killed."""


class EnvCallError(RuntimeError):
    """The env answered a call with a JSON-RPC error."""

    def __init__(self, method: str, error: dict[str, Any]):
        self.code = error.get("code")
        super().__init__(f"{method} failed in the env: {error.get('message', error)}")


class EnvProcess:
    """A JSON-RPC client over one sandbox's stdio stream."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self._ids = itertools.count(1)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and wait for its reply (callers bound the wait with a deadline)."""
        request_id = next(self._ids)
        await self._send(method, params, request_id)
        try:
            while True:
                reply = json.loads(await self.sandbox.read_line())
                if isinstance(reply, dict) and reply.get("id") == request_id:
                    break
        except EOFError as error:
            raise EnvDied(self._died_message()) from error
        except json.JSONDecodeError as error:
            raise EnvDied(f"the env wrote something that is not JSON-RPC on stdout: {error}") from error
        if "error" in reply:
            raise EnvCallError(method, reply["error"])
        return reply.get("result")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send(method, params)

    async def initialize(self, *, await_reply: bool = True) -> None:
        """MCP's handshake. corral's own runtime answers lines in order, so for it the reply
        need not be awaited (`await_reply=False`): the next call's reply comes after it, and a
        reset saves a round trip. A plain MCP server gets the handshake by the book."""
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "corral", "version": "1"}}
        if await_reply:
            await self.call("initialize", params)
        else:
            await self._send("initialize", params, next(self._ids))  # its reply is dropped by the next call
        await self.notify("notifications/initialized")

    async def _send(self, method: str, params: dict[str, Any] | None, request_id: int | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if request_id is not None:
            message["id"] = request_id
        try:
            await self.sandbox.send_line(json.dumps(message, separators=(",", ":")).encode())
        except EOFError as error:
            raise EnvDied(self._died_message()) from error

    def _died_message(self) -> str:
        tail = self.sandbox.stderr_tail(1500).strip()
        return "the env process exited" + (f"; its stderr ends with:\n{tail}" if tail else " without writing to stderr")
