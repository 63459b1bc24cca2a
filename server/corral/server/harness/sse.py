"""A complete chat completion replayed as the server-sent events of a streamed one.

The capture proxy never streams from the engine (a streamed reply's ids arrive in pieces, and a
harness that asked for SSE and got JSON yields nothing), so an agent that asked for `stream:
true` gets the whole answer as chunks: the role and content, each tool call, the finish reason,
the usage when `stream_options.include_usage` asked for it, and `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

KEEPALIVE = b": corral keepalive\n\n"


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def chunks(reply: dict[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    """`reply` (a `chat.completion`) as `chat.completion.chunk` events, ending `[DONE]`."""
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}
    for choice in reply["choices"]:
        index, message = choice["index"], choice["message"]
        opening: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        for key in ("reasoning", "reasoning_content"):
            if message.get(key):
                opening[key] = message[key]
        yield event(head | {"choices": [{"index": index, "delta": opening, "finish_reason": None}]})
        for position, call in enumerate(message.get("tool_calls") or []):
            delta = {"tool_calls": [{"index": position, **call}]}
            yield event(head | {"choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        ending = {
            "index": index,
            "delta": {},
            "finish_reason": choice["finish_reason"],
            "logprobs": choice.get("logprobs"),
        }
        yield event(head | {"choices": [ending]})
    if include_usage:
        yield event(head | {"choices": [], "usage": reply.get("usage")})
    yield b"data: [DONE]\n\n"


def error_event(status: int, reply: dict[str, Any]) -> Iterator[bytes]:
    """A failure after the stream began: an error event, never an assistant turn."""
    error = reply.get("error")
    if not isinstance(error, dict):
        error = {"message": str(reply)}
    yield event({"error": {**error, "code": status}})
    yield b"data: [DONE]\n\n"
