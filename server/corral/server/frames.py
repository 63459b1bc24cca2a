"""Parsing a client's frame into a typed message, and dispatching it to its session."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from corral.client.protocol import (
    CLIENT_FRAME_TYPES,
    CloseFrame,
    ErrorCode,
    McpFrame,
    ResetFrame,
    StateFrame,
    StepFrame,
)
from corral.server.sessions import FrameError, Session

log = logging.getLogger("corral.server")

_MODELS: dict[str, type[BaseModel]] = {
    "reset": ResetFrame,
    "step": StepFrame,
    "state": StateFrame,
    "close": CloseFrame,
    "mcp": McpFrame,
}


def error_frame(code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code.value, **extra}}


def parse_frame(text: str) -> BaseModel:
    """The typed frame `text` holds; raise FrameError saying what is wrong with it."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise FrameError(ErrorCode.INVALID_JSON, f"the frame is not JSON: {error}") from None
    if not isinstance(raw, dict) or "type" not in raw:
        raise FrameError(ErrorCode.VALIDATION_ERROR, 'a frame is a JSON object with a "type"')
    model = _MODELS.get(raw["type"]) if isinstance(raw["type"], str) else None
    if model is None:
        raise FrameError(
            ErrorCode.UNKNOWN_TYPE, f"unknown frame type {raw['type']!r}; send one of {', '.join(CLIENT_FRAME_TYPES)}"
        )
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        details = error.errors(include_url=False, include_context=False, include_input=False)
        summary = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in details)
        raise FrameError(ErrorCode.VALIDATION_ERROR, f"invalid {raw['type']} frame: {summary}", errors=details) from None


async def handle_frame(session: Session, text: str) -> dict[str, Any] | None:
    """The reply to one frame, or None when the client asked to close the session."""
    try:
        frame = parse_frame(text)
        if isinstance(frame, CloseFrame):
            return None
        if isinstance(frame, ResetFrame):
            return await session.reset(frame)
        if isinstance(frame, StepFrame):
            return await session.step(frame)
        if isinstance(frame, StateFrame):
            return session.state()
        assert isinstance(frame, McpFrame)
        return await session.mcp(frame)
    except FrameError as error:
        return error_frame(error.code, str(error), **error.extra)
    except Exception as error:  # a bug must not take the session down; the client gets the reason
        log.exception("frame failed on session %s", session.session_id)
        return error_frame(ErrorCode.EXECUTION_ERROR, f"{type(error).__name__}: {error}")
