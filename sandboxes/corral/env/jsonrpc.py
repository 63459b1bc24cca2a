"""JSON-RPC 2.0 as MCP's stdio transport frames it: one JSON object per line.

Both ends of the link between corral's server and an env process use this module: the env
runtime (`corral.env.runtime`, inside the sandbox) and the server's client of it
(`corral.server.connection.stdio`). Standard library only, since it runs in every sandbox.

    line = encode(request("corral-1", "tools/list"))     # b'{"jsonrpc":"2.0","id":"corral-1",...}'
    decode(line)                                          # -> the dict again
"""

from __future__ import annotations

import json
from typing import Any

# The MCP version corral speaks, and those it accepts from a client (MCP's rule: echo the
# client's version when it is one of these, else answer with our own).
PROTOCOL_VERSION = "2025-06-18"
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

# An env that answers corral's hooks declares them in its initialize result, as
# `capabilities.experimental.corral = {"hooks": [...]}`; the server calls no other.
CAPABILITY = "corral"
HOOKS = ("corral/reset", "corral/end_turn", "corral/report", "corral/run_agent")

# A failed tools/call result names its kind in `_meta`, so the server can tell the client
# OpenEnv's `error_type`: "tool_not_found", "invalid_args" or "execution_error".
ERROR_TYPE_META = "corral/error_type"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000  # the method itself failed (in the runtime: reset, end_turn or report)


# json.dumps would build this encoder again for every line (each end writes one a tool call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class RpcError(Exception):
    """A JSON-RPC error: `code`, `message` and optional `data`."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def encode(message: dict) -> bytes:
    """One message as one line, without its newline: compact JSON in UTF-8.

    A lone surrogate (which UTF-8 cannot carry) is written as JSON's own `\\udXXX` escape.
    """
    return _ENCODER.encode(message).encode("utf-8", "backslashreplace")


def decode(line: bytes | str) -> dict:
    """One line as a message; RpcError -32700 when it is not JSON, -32600 when not an object."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested too deep to parse
        raise RpcError(PARSE_ERROR, f"parse error: {exc}") from None
    if not isinstance(message, dict):
        raise RpcError(INVALID_REQUEST, "invalid message: expected a JSON object")
    return message


def request(request_id: str | int, method: str, params: dict | None = None) -> dict:
    """A request: the other end answers it with a result or an error of the same id."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


def notification(method: str, params: dict | None = None) -> dict:
    """A notification: a request without an id, which gets no answer."""
    return {"jsonrpc": "2.0", "method": method, "params": params or {}}


def result(request_id: Any, value: Any) -> dict:
    """The successful answer to the request `request_id`."""
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict:
    """The failed answer to the request `request_id` (None when its id could not be read)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}
