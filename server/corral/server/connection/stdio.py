"""Speaking to an env process over its sandbox's stdio: newline-delimited JSON-RPC 2.0 (the
stdio `EnvConnection`).

The env side is `corral.env.runtime` or any MCP stdio server, so the stream may carry more
than replies: the env's own requests to corral (a tool that pings its client), notifications
(log lines, progress) and lines that are not JSON at all (a tool's `print` in servers that
leave stdout to their code). While a call waits, the env's requests are answered, the rest
is skipped, and only a message that answers the call's own id ends the wait. corral's ids
are strings ("corral-1", ...), so they never collide with the integer ids SDK servers give
their requests. Calls are sequential within an episode; a late reply to an abandoned call is
skipped like any other message.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from corral.env import jsonrpc
from corral.protocol.surrogates import has_lone_surrogate_escape, replace_lone_surrogates
from corral.sandboxes import Sandbox
from corral.server.connection.base import EnvCallError, EnvDied

log = logging.getLogger("corral.server.connection.stdio")

CLIENT_INFO = {"name": "corral", "version": "1"}


class EnvProcess:
    """A JSON-RPC client over one sandbox's stdio stream. `corral_runtime`: the env is corral's
    own runtime (`python3 -m corral.env`), whose handshake saves a round trip (`initialize`)."""

    def __init__(self, sandbox: Sandbox, *, corral_runtime: bool = False):
        self.sandbox = sandbox
        self.corral_runtime = corral_runtime
        self.hooks: frozenset[str] = frozenset()  # the corral/* methods the env declared
        self.skipped_lines = 0  # lines on the env's stdout that were not JSON-RPC
        self._last_skipped = ""
        self._ids = (f"corral-{n}" for n in itertools.count(1))
        self._unanswered = 0  # calls given up on (a deadline): the env may still be working on one

    @property
    def idle(self) -> bool:
        """Whether the env has answered every call: one given up on may still hold it busy."""
        return self._unanswered == 0

    async def initialize(self) -> None:
        """MCP's handshake, which also tells which of corral's hooks the env answers.

        corral's own runtime has every hook and answers lines in order, so its reply is not
        awaited: the next call's reply comes after it, and a reset saves a round trip. Any other
        MCP server gets the handshake by the book, and hooks only if it declares
        `capabilities.experimental.corral`.
        """
        params = {
            "protocolVersion": jsonrpc.PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        if self.corral_runtime:
            # Its reply is skipped by the next call, as a reply to an id it is not waiting for.
            await self._send(jsonrpc.request(next(self._ids), "initialize", params))
            self.hooks = frozenset(jsonrpc.HOOKS)
        else:
            result = await self.call("initialize", params)
            self.hooks = _declared_hooks(result)
        await self.notify("notifications/initialized")

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and wait for its reply (callers bound the wait with a deadline)."""
        request_id = next(self._ids)
        await self._send(jsonrpc.request(request_id, method, params))
        self._unanswered += 1
        while True:
            message = await self._read()
            if message is None:
                continue
            if _answers(message, request_id):
                break
            if isinstance(message.get("method"), str) and "id" in message:
                await self._answer_env_request(message)
            # Anything else (a notification, a late reply) is not for this call.
        self._unanswered -= 1
        if "error" in message:
            error = message["error"]
            raise EnvCallError(method, error if isinstance(error, dict) else {"message": error})
        return message["result"]

    async def hook(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call one of corral's hooks (`corral/reset`, ...); None, with nothing sent, when the
        env did not declare it (a plain MCP server plays a tool-only env)."""
        if method not in self.hooks:
            return None
        return await self.call(method, params)

    async def list_tools(self) -> list[Any]:
        return (await self.call("tools/list"))["tools"]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self.call("tools/call", {"name": name, "arguments": arguments})

    async def close(self) -> None:
        await self.sandbox.close()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send(jsonrpc.notification(method, params))

    async def _answer_env_request(self, message: dict[str, Any]) -> None:
        """corral answers `ping`, and refuses the rest (roots, sampling...): it declares no
        client capabilities, and an unanswered request would hang the env's tool."""
        method = message["method"]
        if method == "ping":
            await self._send(jsonrpc.result(message["id"], {}))
        else:
            text = f"corral does not serve {method}; it answers only ping"
            await self._send(jsonrpc.error(message["id"], jsonrpc.METHOD_NOT_FOUND, text))

    async def _read(self) -> dict[str, Any] | None:
        """The next message from the env; None for a line that is not one (skipped, counted)."""
        try:
            line = await self.sandbox.read_line()
        except EOFError as error:
            raise EnvDied(self._died_message(error)) from error
        try:
            message = jsonrpc.decode(line)
        except jsonrpc.RpcError:
            self.skipped_lines += 1
            self._last_skipped = line.decode("utf-8", "replace")[:200]
            log.debug("skipped a line of the env's stdout that is not JSON-RPC: %r", self._last_skipped)
            return None
        return replace_lone_surrogates(message) if has_lone_surrogate_escape(line) else message

    async def _send(self, message: dict[str, Any]) -> None:
        try:
            await self.sandbox.send_line(jsonrpc.encode(message))
        except EOFError as error:
            raise EnvDied(self._died_message(error)) from error

    def _died_message(self, error: EOFError) -> str:
        message = str(error) or "the env process exited"
        tail = self.sandbox.stderr_tail(1500).strip()
        if tail:
            message += f"; the env's stderr ends with:\n{tail}"
        else:
            message += "; the env wrote nothing to stderr"
        if self.skipped_lines:
            message += (
                f"\n(it also wrote {self.skipped_lines} line(s) on stdout that are not JSON-RPC; "
                f"the last: {self._last_skipped!r})"
            )
        return message


def _answers(message: dict[str, Any], request_id: str) -> bool:
    """Whether `message` is the reply to the request `request_id` (not a request of the env's
    that happens to carry the same id)."""
    return message.get("id") == request_id and "method" not in message and ("result" in message or "error" in message)


def _declared_hooks(initialize_result: Any) -> frozenset[str]:
    """The hooks an env declares in `capabilities.experimental.corral.hooks`; none otherwise."""
    try:
        declared = initialize_result["capabilities"]["experimental"][jsonrpc.CAPABILITY]["hooks"]
    except (KeyError, TypeError):
        return frozenset()
    if not isinstance(declared, list):
        return frozenset()
    return frozenset(hook for hook in declared if hook in jsonrpc.HOOKS)
