"""`WS /ws`: one session per socket, frames handled one at a time.

The socket is read while a frame is being handled, so a client that disconnects mid-call
has its episode torn down at once rather than when the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import WebSocket, WebSocketDisconnect

from corral.client.protocol import ErrorCode
from corral.server.frames import error_frame, handle_frame
from corral.server.sessions import CapacityReached, Session, SessionRegistry

log = logging.getLogger("corral.server")


async def serve_socket(websocket: WebSocket, registry: SessionRegistry) -> None:
    await websocket.accept()
    try:
        session = await registry.open()
    except CapacityReached as error:
        await websocket.send_json(error_frame(
            ErrorCode.CAPACITY_REACHED, str(error), active_sessions=error.active, max_sessions=error.limit
        ))
        await websocket.close()
        return
    try:
        await _play(websocket, session)
    except WebSocketDisconnect:
        pass  # the client left while we answered; its episode is torn down below
    finally:
        await registry.release(session)
        with contextlib.suppress(Exception):  # already closed by the client, most often
            await websocket.close()


async def _play(websocket: WebSocket, session: Session) -> None:
    inbox: asyncio.Queue[str | None] = asyncio.Queue()
    reader = asyncio.create_task(_read(websocket, inbox))
    try:
        while (text := await inbox.get()) is not None:
            handling = asyncio.create_task(handle_frame(session, text))
            await asyncio.wait({handling, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not handling.done():  # the client left mid-call: stop waiting for the env
                handling.cancel()
                await asyncio.gather(handling, return_exceptions=True)
                return
            reply = handling.result()
            if reply is None or reader.done():  # a close frame, or nobody left to answer
                return
            await websocket.send_text(json.dumps(reply))
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
    except Exception as error:  # a broken socket ends the session like a disconnect
        log.info("session socket closed: %s", error)
    finally:
        await inbox.put(None)
