"""One client frame in, one reply frame out: parsed with the protocol's models, dispatched to
the session. Every failure becomes an `error` frame and the session goes on. (The relay's
`model_response` frames are not the session's: the socket hands them to its relay.)"""

from __future__ import annotations

import json
import logging

from pydantic import BaseModel, ValidationError

from corral.protocol import surrogates
from corral.protocol.frames import (
    CLIENT_FRAME_TYPES,
    CLIENT_FRAMES,
    ClientFrame,
    CloseRequest,
    ErrorCode,
    ErrorReply,
    McpReply,
    McpRequest,
    ResetRequest,
    StateReply,
    StateRequest,
    StepRequest,
)
from corral.protocol.harness.relay_frames import MODEL_RESPONSE, ModelResponse, ModelResponseData
from corral.protocol.reply_text import observation_reply_text
from corral.protocol.surrogates import has_lone_surrogate_escape
from corral.server.harness.socket_upstream import WebSocketUpstream
from corral.server.serving.mcp import answer_mcp
from corral.server.serving.sessions import FrameError, ServedSession, SessionRegistry

log = logging.getLogger("corral.server")


def parse_frame(text: str) -> ClientFrame:
    """The typed frame `text` holds; raise FrameError saying what is wrong with it."""
    if not has_lone_surrogate_escape(text):
        try:  # one pass for a good frame; a bad one is read again below, to say what is wrong
            return CLIENT_FRAMES.validate_json(text)
        except ValidationError:
            pass
    try:
        raw = surrogates.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise FrameError(ErrorCode.INVALID_JSON, f"the frame is not JSON: {error}") from None
    if not isinstance(raw, dict) or "type" not in raw:
        raise FrameError(ErrorCode.VALIDATION_ERROR, 'a frame is a JSON object with a "type"')
    if raw["type"] not in CLIENT_FRAME_TYPES:
        shown = json.dumps(raw["type"])[:100]
        raise FrameError(
            ErrorCode.UNKNOWN_TYPE, f"unknown frame type {shown}; send one of {', '.join(CLIENT_FRAME_TYPES)}"
        )
    try:
        return CLIENT_FRAMES.validate_python(raw)
    except ValidationError as error:
        details = error.errors(include_url=False, include_context=False, include_input=False)
        summary = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in details)
        raise FrameError(
            ErrorCode.VALIDATION_ERROR, f"invalid {raw['type']} frame: {summary}", errors=details
        ) from None


def model_response(text: str) -> ModelResponseData | None:
    """The relay's answer `text` holds, if it is one (looked for cheaply first: most frames are not)."""
    if MODEL_RESPONSE not in text:
        return None
    try:
        return ModelResponse.model_validate_json(text).data
    except ValidationError:
        return None


async def handle_frame(
    session: ServedSession, registry: SessionRegistry, text: str, *, relay: WebSocketUpstream
) -> str | BaseModel | None:
    """The reply to one frame (an observation as its JSON text already), or None when the
    client asked to close the session. `relay` is the socket's: each reset says whether it is used."""
    try:
        frame = parse_frame(text)
        if isinstance(frame, CloseRequest):
            return None
        if isinstance(frame, ResetRequest):
            relay.asked = frame.data.llm == "relay"
            return observation_reply_text(await session.reset(frame.data))
        if isinstance(frame, StepRequest):
            return observation_reply_text(await session.step(frame.data))
        if isinstance(frame, McpRequest):
            return McpReply(data=await answer_mcp(frame.data, registry, session=session))
        assert isinstance(frame, StateRequest)
        return StateReply(data=session.state())
    except FrameError as error:
        return ErrorReply.of(error.code, str(error), **error.extra)
    except Exception:  # a bug must not take the session down, nor show the client its internals
        log.exception("frame failed on session %s", session.session_id)
        return ErrorReply.of(
            ErrorCode.EXECUTION_ERROR, "the server failed to handle this frame; its log has the reason"
        )
