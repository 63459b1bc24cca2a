"""JSON-RPC 2.0 for clients: `mcp` frames on a socket, and `POST /mcp`, as OpenEnv serves them.

Methods: MCP's `initialize`, `ping`, `tools/list` and `tools/call`, OpenEnv's
`openenv/session/create` and `openenv/session/close`, and corral's `corral/episode/fork`
(`forks.py`). Over a socket a request acts on that
socket's session; over HTTP on the session its `params.session_id` names (`tools/list`
without one lists every tool the bundle offers). A malformed request gets its JSON-RPC error
(-32600, -32601, -32602); an internal failure gets -32603 with no internals in it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, overload

from pydantic import ValidationError

from corral.env import jsonrpc
from corral.protocol.frames import (
    FORK_METHOD,
    ForkRefusal,
    JsonRpcError,
    JsonRpcRequest,
    JsonRpcResponse,
)
from corral.server.episodes.fork import ForkFailed
from corral.server.serving.forks import fork_session
from corral.server.serving.sessions import CapacityReached, FrameError, ServedSession, SessionRegistry

log = logging.getLogger("corral.server")


class _Refusal(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.error = JsonRpcError(code=code, message=message, data=data)


async def answer_mcp(raw: Any, registry: SessionRegistry, *, session: ServedSession | None = None) -> JsonRpcResponse:
    """The response to one JSON-RPC request; `session` is the socket's, None over HTTP."""
    request_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), (int, str)) else None
    try:
        request = _request(raw)
        return JsonRpcResponse(id=request.id, result=await _dispatch(request, registry, session))
    except _Refusal as refusal:
        return JsonRpcResponse(id=request_id, error=refusal.error)
    except Exception:
        log.exception("JSON-RPC request failed")
        return JsonRpcResponse(
            id=request_id,
            error=JsonRpcError(code=jsonrpc.INTERNAL_ERROR, message="internal error; the server's log has the reason"),
        )


def parse_error(error: Exception) -> JsonRpcResponse:
    """The response to a body that is not JSON."""
    return JsonRpcResponse(error=JsonRpcError(code=jsonrpc.PARSE_ERROR, message=f"Parse error: {error}"))


def session_named(raw: Any) -> Any:
    """The `params.session_id` of a request body (None when it has none), before it is validated."""
    params = raw.get("params") if isinstance(raw, dict) else None
    return params.get("session_id") if isinstance(params, dict) else None


def _request(raw: Any) -> JsonRpcRequest:
    if isinstance(raw, list):
        raise _Refusal(
            jsonrpc.INVALID_REQUEST, "Invalid request: batches are not supported; send one request at a time"
        )
    try:
        return JsonRpcRequest.model_validate(raw)
    except ValidationError as error:
        summary = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in error.errors())
        raise _Refusal(jsonrpc.INVALID_REQUEST, f"Invalid request: {summary}") from None


async def _dispatch(request: JsonRpcRequest, registry: SessionRegistry, own: ServedSession | None) -> Any:
    method, params = request.method, request.params
    if method == "initialize":
        return {
            "protocolVersion": jsonrpc.PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"corral: {registry.served.name}", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "openenv/session/create":
        return {"session_id": own.session_id if own is not None else _create(registry).session_id}
    if method == "openenv/session/close":
        return await _close(registry, own, params)
    if method == "tools/list":
        session = _session(registry, own, params, required=False)
        tools = session.list_tools().tools if session is not None else registry.served.all_tools()
        return {"tools": [tool.as_mcp() for tool in tools]}
    if method == "tools/call":
        return await _call(_session(registry, own, params, required=True), params)
    if method == FORK_METHOD:
        return await _fork(registry, _session(registry, own, params, required=True), params)
    raise _Refusal(
        jsonrpc.METHOD_NOT_FOUND,
        f"Method not found: {method}; corral answers initialize, ping, tools/list, tools/call, "
        f"openenv/session/create, openenv/session/close and {FORK_METHOD}",
    )


def _create(registry: SessionRegistry) -> ServedSession:
    try:
        return registry.open(over_http=True)
    except CapacityReached as full:
        raise _Refusal(
            jsonrpc.SERVER_ERROR, str(full), {"active_sessions": full.active, "max_sessions": full.limit}
        ) from None


async def _fork(registry: SessionRegistry, session: ServedSession, params: dict[str, Any]) -> dict[str, Any]:
    n = params.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= registry.limit:
        raise _Refusal(
            jsonrpc.INVALID_PARAMS,
            f"Invalid params: {FORK_METHOD} takes {{n: the number of copies, 1 to {registry.limit}}}",
        )
    try:
        copies = await fork_session(registry, session, n)
    except ForkFailed as refused:
        raise _Refusal(jsonrpc.SERVER_ERROR, str(refused), {"code": refused.code}) from None
    except CapacityReached as full:
        raise _Refusal(
            jsonrpc.SERVER_ERROR,
            str(full),
            {"code": ForkRefusal.CAPACITY_REACHED, "active_sessions": full.active, "max_sessions": full.limit},
        ) from None
    return {
        "session_ids": [each.session_id for each in copies],
        "episode_ids": [each.episode.episode_id for each in copies if each.episode is not None],
    }


async def _close(registry: SessionRegistry, own: ServedSession | None, params: dict[str, Any]) -> dict[str, Any]:
    session = _session(registry, None, params, required=True)
    if session is own:
        raise _Refusal(jsonrpc.INVALID_REQUEST, "this socket's own session closes with a close frame, not over MCP")
    if session.attached:
        session.closing = True  # it closes once its socket detaches
        return {"session_id": session.session_id, "closed": False, "closing": True}
    await registry.release(session)
    return {"session_id": session.session_id, "closed": True}


@overload
def _session(
    registry: SessionRegistry, own: ServedSession | None, params: dict[str, Any], *, required: Literal[True]
) -> ServedSession: ...
@overload
def _session(
    registry: SessionRegistry, own: ServedSession | None, params: dict[str, Any], *, required: Literal[False]
) -> ServedSession | None: ...
def _session(
    registry: SessionRegistry, own: ServedSession | None, params: dict[str, Any], *, required: bool
) -> ServedSession | None:
    if own is not None:
        return own
    session_id = params.get("session_id")
    if session_id is None and not required:
        return None
    if not isinstance(session_id, str):
        raise _Refusal(jsonrpc.INVALID_PARAMS, "Invalid params: 'session_id' is required (from openenv/session/create)")
    session = registry.sessions.get(session_id)
    if session is None or not session.over_http:
        raise _Refusal(jsonrpc.INVALID_PARAMS, f"Unknown session_id: {session_id}")
    session.idle_since = time.monotonic()
    return session


async def _call(session: ServedSession, params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments", {})
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise _Refusal(jsonrpc.INVALID_PARAMS, "Invalid params: tools/call takes {name: string, arguments: object}")
    try:
        observed = await session.call_tool(name, arguments)  # not a step frame: step_count stays
    except FrameError as error:
        raise _Refusal(jsonrpc.SERVER_ERROR, str(error)) from None
    answer = observed.answer
    ending = {
        "reward": observed.reward,
        "done": observed.done,
        "status": observed.status,
        "scores": observed.scores,
        "reason": observed.reason,
        "metadata": observed.metadata or None,  # a harness episode's capture (run_agent)
    }
    # MCP's CallToolResult, plus OpenEnv's `data` (what its MCPToolClient returns).
    return {
        "content": [{"type": "text", "text": answer}],
        "isError": observed.error is not None,
        "structuredContent": {key: value for key, value in ending.items() if value is not None},
        "data": answer,
    }
