"""`WS /ws`: one session per socket (its own, or one created over HTTP and named by
`?session_id=`), frames handled one at a time.

The socket is read while a frame is being handled, so a client that disconnects mid-call
has its episode torn down at once rather than when the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket, WebSocketDisconnect

from corral.client.protocol import ErrorCode, ErrorReply
from corral.server.frames import handle_frame
from corral.server.sessions import CapacityReached, FrameError, ServedSession, SessionRegistry

log = logging.getLogger("corral.server")
INBOX_FRAMES = 4  # frames read ahead of the one being handled


async def serve_socket(websocket: WebSocket, registry: SessionRegistry) -> None:
    await websocket.accept()
    try:
        session = _session_for(websocket, registry)
    except (CapacityReached, FrameError) as refused:
        await websocket.send_text(_refusal(refused).model_dump_json())
        await websocket.close()
        return
    try:
        await _play(websocket, session, registry)
    except WebSocketDisconnect:
        pass  # the client left while we answered; its episode is torn down below
    finally:
        await registry.detach(session)
        with contextlib.suppress(Exception):  # already closed by the client, most often
            await websocket.close()


def _session_for(websocket: WebSocket, registry: SessionRegistry) -> ServedSession:
    session_id = websocket.query_params.get("session_id")
    if session_id is not None:
        return registry.attach(session_id)
    session = registry.open()
    session.attached = True
    return session


def _refusal(refused: CapacityReached | FrameError) -> ErrorReply:
    if isinstance(refused, CapacityReached):
        return ErrorReply.of(ErrorCode.CAPACITY_REACHED, str(refused), active_sessions=refused.active,
                             max_sessions=refused.limit)
    return ErrorReply.of(refused.code, str(refused), **refused.extra)


async def _play(websocket: WebSocket, session: ServedSession, registry: SessionRegistry) -> None:
    # Bounded: a client that floods frames during a call waits (its socket is not read) instead
    # of filling the server's memory. A close queued behind a full inbox is seen once a frame is handled.
    inbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=INBOX_FRAMES)
    reader = asyncio.create_task(_read(websocket, inbox))
    try:
        while (text := await inbox.get()) is not None:
            handling = asyncio.create_task(handle_frame(session, registry, text))
            await asyncio.wait({handling, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not handling.done():  # the client left mid-call: stop waiting for the env
                handling.cancel()
                await asyncio.gather(handling, return_exceptions=True)
                return
            reply = handling.result()
            if reply is None or reader.done():  # a close frame, or nobody left to answer
                return
            await websocket.send_text(reply.model_dump_json())
    finally:
        reader.cancel()


async def _read(websocket: WebSocket, inbox: asyncio.Queue[str | None]) -> None:
    """Queue the client's frames; a None marks the end of the socket."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
            await inbox.put(text)
    except Exception as error:  # noqa: BLE001 - a broken socket ends the session like a disconnect
        log.info("session socket closed: %s", error)
    finally:
        await inbox.put(None)
