"""Reading what an env answered: tool results as the client's observations, and the fields of
its hooks' answers.

The env answers as whoever holds its sandbox made it answer (an agent with a shell can make
its env say anything), so nothing here raises on a malformed answer: a malformed part counts
as absent.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from corral.env import jsonrpc
from corral.protocol.frames import STEP_REWARD, CallToolObservation, ToolError

ERROR_TYPES = get_args(ToolError.model_fields["error_type"].annotation)


def field_of(answer: Any, key: str, kind: type) -> Any:
    """`answer[key]` when the env's answer is an object and that field is a `kind`; else None.
    The env answers as its sandbox's holder made it: a malformed answer is an absent one."""
    value = answer.get(key) if isinstance(answer, dict) else None
    return value if isinstance(value, kind) else None


def refused(name: str, error_type: str, message: str) -> CallToolObservation:
    """A call the episode turned down; the model reads why, and the episode goes on."""
    return CallToolObservation(
        tool_name=name,
        error=ToolError(error_type=error_type, message=message),  # type: ignore[arg-type]
        reward=STEP_REWARD,
    )


def tool_answer(name: str, result: Any, max_chars: int) -> CallToolObservation:
    """An MCP tools/call result as the client's observation: its text (or, with none, its
    structured content as JSON); a failure says which kind, as corral's runtime names it. The
    result is read as the env wrote it: parts of it that are malformed count as absent."""
    if (text := _one_text(result)) is not None and len(text) <= max_chars:  # most answers: read at once
        return CallToolObservation(tool_name=name, result=text, reward=STEP_REWARD)
    parts = field_of(result, "content", list) or []
    text = "".join(
        part["text"] for part in parts if field_of(part, "type", str) == "text" and field_of(part, "text", str)
    )
    if not text and isinstance(result, dict) and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], separators=(",", ":"))
    text = cut(text, max_chars)
    if isinstance(result, dict) and result.get("isError"):
        kind = field_of(field_of(result, "_meta", dict), jsonrpc.ERROR_TYPE_META, str)
        return refused(name, kind if kind in ERROR_TYPES else "execution_error", text)
    return CallToolObservation(tool_name=name, result=text, reward=STEP_REWARD)


def _one_text(result: Any) -> str | None:
    """The text of a result that is one text part and no error (as a tool's `str` answers), read
    as `tool_answer` reads any result; None for any other result."""
    if type(result) is not dict or result.get("isError"):
        return None
    content = result.get("content")
    if type(content) is not list or len(content) != 1 or type(part := content[0]) is not dict:
        return None
    text = part.get("text")
    return text if part.get("type") == "text" and type(text) is str and text else None


def cut(text: str, max_chars: int) -> str:
    """`text`, or its head and tail with a note of what was left out when it is longer than `max_chars`."""
    if len(text) <= max_chars:
        return text
    note = f"\n[... {len(text) - max_chars:,} characters cut: the answer was {len(text):,}, the server keeps {max_chars:,} ...]\n"
    half = max(0, (max_chars - len(note)) // 2)
    return text[:half] + note + text[len(text) - half :]
