"""`WS /ws`: one session per socket (its own, or one created over HTTP and named by
`?session_id=`), frames handled one at a time.

The socket is read while a frame is being handled, so a client that disconnects mid-call
has its episode torn down at once rather than when the call ends. Two tasks per socket, made
once: a reader that queues frames, and a player that handles them and answers. The request's
own task (under every middleware's frame) only waits for either to end, so a frame costs no
task of its own and wakes no deep coroutine stack (a task and a wait per frame, and two wakes
of that stack, were about a tenth of a tool call's CPU in the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket, WebSocketDisconnect

from corral.protocol.frames import ErrorCode, ErrorReply
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
        return ErrorReply.of(
            ErrorCode.CAPACITY_REACHED, str(refused), active_sessions=refused.active, max_sessions=refused.limit
        )
    return ErrorReply.of(refused.code, str(refused), **refused.extra)


async def _play(websocket: WebSocket, session: ServedSession, registry: SessionRegistry) -> None:
    # Bounded: a client that floods frames during a call waits (its socket is not read) instead
    # of filling the server's memory. A close queued behind a full inbox is seen once a frame is handled.
    inbox: asyncio.Queue[str] = asyncio.Queue(maxsize=INBOX_FRAMES)
    reader = asyncio.create_task(_read(websocket, inbox))
    player = asyncio.create_task(_answer(websocket, session, registry, inbox))
    try:
        # The reader ends when the client leaves: the player then stops, mid-call or not (its
        # episode is torn down by the caller), and frames still queued go unanswered.
        await asyncio.wait({reader, player}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reader.cancel()  # not awaited: nothing waits on it, and the episode's end is not delayed
        if not player.done():
            player.cancel()
            await asyncio.gather(player, return_exceptions=True)
    failed = None if player.cancelled() else player.exception()
    if failed is not None and not isinstance(failed, WebSocketDisconnect):
        raise failed


async def _answer(
    websocket: WebSocket, session: ServedSession, registry: SessionRegistry, inbox: asyncio.Queue[str]
) -> None:
    """Handle the queued frames one at a time and send each its reply, until a close frame."""
    while (reply := await handle_frame(session, registry, await inbox.get())) is not None:
        await websocket.send_text(reply if isinstance(reply, str) else reply.model_dump_json())


async def _read(websocket: WebSocket, inbox: asyncio.Queue[str]) -> None:
    """Queue the client's frames until the socket ends."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
            await inbox.put(text)
    except Exception as error:  # noqa: BLE001 - a broken socket ends the session like a disconnect
        log.info("session socket closed: %s", error)
