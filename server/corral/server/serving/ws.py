"""`WS /ws`: one session per socket (its own, or one created over HTTP and named by
`?session_id=`), frames handled one at a time.

A socket that sends no frame for `IDLE_TTL_S` between calls (the time a session created over
HTTP may be left without one) is closed, its session with it: attached or not, a client that
holds a slot without playing takes it from every trainer, and its env from the machine.

A client that disconnects mid-call has its episode torn down then (within `WATCH_AFTER_S`)
rather than when the call ends, so the socket must be read during a call. One task per socket, made once, plays the
frames: it reads the next frame itself between calls, and a call still running after
`WATCH_AFTER_S` gets a watcher task that reads for it, ending the call if the client leaves
and keeping the frames sent meanwhile for after it. (A reader task handing every frame to the
player was about a tenth of a tool call's CPU in the server; most calls end before a watcher
is needed.) The request's own task (under every middleware's frame) only waits for the player,
so a frame wakes no deep coroutine stack.

Each socket has its relay (`harness.socket_upstream`), used when its client asks at a reset:
a harness episode's model calls go out as frames while its call plays, and the client's
answers are handed to the relay as they are read, by the player or the watcher, never kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from fastapi import WebSocket, WebSocketDisconnect

from corral.protocol.frames import ErrorCode, ErrorReply
from corral.server.episodes.alarms import Alarm
from corral.server.harness.socket_upstream import WebSocketUpstream
from corral.server.serving.frames import handle_frame, model_response
from corral.server.serving.sessions import (
    DETACHED_TTL_S,
    CapacityReached,
    FrameError,
    ServedSession,
    SessionRegistry,
)

log = logging.getLogger("corral.server")
INBOX_FRAMES = 4  # frames a watcher reads ahead of the one being handled
WATCH_AFTER_S = 0.05  # a call still running this long has the socket read for it (the client may leave)
IDLE_TTL_S = DETACHED_TTL_S  # a socket that sends no frame this long between calls is closed, with its session


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
    player = asyncio.create_task(_answer(websocket, session, registry))
    try:
        await asyncio.wait({player})  # the client left, or asked to close, or the server stops
    finally:
        if not player.done():
            player.cancel()
            await asyncio.gather(player, return_exceptions=True)
    failed = None if player.cancelled() else player.exception()
    if failed is not None and not isinstance(failed, WebSocketDisconnect):
        raise failed


async def _answer(websocket: WebSocket, session: ServedSession, registry: SessionRegistry) -> None:
    """Handle the client's frames one at a time and send each its reply, until a close frame
    or the client leaves (then the watcher cancels this task, mid-call or not)."""
    frames = _Frames(websocket)
    frames.relay.bind()
    try:
        while (text := await _next_before_idle(frames, websocket, session)) is not None:
            frames.watch()
            try:
                reply = await handle_frame(session, registry, text, relay=frames.relay)
            finally:
                frames.unwatch()
            if reply is None:
                return
            await websocket.send_text(reply if isinstance(reply, str) else reply.model_dump_json())
    finally:
        frames.close()


async def _next_before_idle(frames: _Frames, websocket: WebSocket, session: ServedSession) -> str | None:
    """The client's next frame; None when it has left, or has sent none for IDLE_TTL_S (then its
    session is closed with the socket, even one created over HTTP, and the client is told why)."""
    try:
        return await asyncio.wait_for(frames.next(), IDLE_TTL_S)
    except TimeoutError:
        pass
    log.info("closing session %s: its socket sent no frame for %.0fs", session.session_id, IDLE_TTL_S)
    session.closing = True
    idle = ErrorReply.of(
        ErrorCode.SESSION_ERROR,
        f"the session was closed: its socket sent no frame for {IDLE_TTL_S:.0f}s, and an idle session "
        "holds a slot (and an env) from every other client; send a frame within that time, or open a new session",
    )
    with contextlib.suppress(Exception):  # the client may be gone too
        await websocket.send_text(idle.model_dump_json())
    return None


class _Frames:
    """A socket's frames for its player: read by the player itself between calls, and during a
    call that takes a while by a watcher that keeps them (None once the client has left); the
    relay's answers go to the relay as they come."""

    def __init__(self, websocket: WebSocket):
        self._websocket = websocket
        self._player = asyncio.current_task()
        self._kept: deque[str | None] = deque()  # read by the watcher, not handled yet
        self._watcher: asyncio.Task | None = None
        self._alarm = Alarm(self._start_watching)
        self.relay = WebSocketUpstream(websocket.send_text)

    async def next(self) -> str | None:
        """The next frame's text; None when the client has left."""
        if self._kept:
            return self._kept.popleft()
        while (text := await _read(self._websocket)) is not None and self._relayed(text):
            pass  # the relay's: the player reads on
        return text

    def watch(self) -> None:
        """A call begins: watch the socket if it is still running after WATCH_AFTER_S."""
        self._alarm.arm(WATCH_AFTER_S)

    def unwatch(self) -> None:
        """The call has ended: its watcher (if it had one) stops; what it read is kept."""
        self._alarm.disarm()
        if self._watcher is not None:
            self._watcher.cancel()  # it is reading: a frame it has not taken stays in uvicorn's queue
            self._watcher = None

    def close(self) -> None:
        self.unwatch()
        self._alarm.cancel()
        self.relay.close("the session's socket closed (its client left, or closed the session) before it answered")

    def _start_watching(self) -> None:
        self._watcher = asyncio.create_task(self._watch())

    def _relayed(self, text: str) -> bool:
        """Whether `text` was the client's answer to a model call (then handed to the relay)."""
        response = model_response(text)
        if response is not None:
            self.relay.answer(response)
        return response is not None

    async def _watch(self) -> None:
        # Bounded: a client that floods frames during a call waits (its socket is not read)
        # instead of filling the server's memory; its leaving is then seen once the call ends.
        while len(self._kept) < INBOX_FRAMES:
            text = await _read(self._websocket)
            if text is not None and self._relayed(text):
                continue
            self._kept.append(text)
            if text is None:  # the client left: the call ends now, and its episode with the session
                assert self._player is not None
                self._player.cancel()
                return


async def _read(websocket: WebSocket) -> str | None:
    """The client's next frame's text; None when the socket has ended."""
    try:
        message = await websocket.receive()
    except Exception as error:  # noqa: BLE001 - a broken socket ends the session like a disconnect
        log.info("session socket closed: %s", error)
        return None
    if message["type"] == "websocket.disconnect":
        return None
    text = message.get("text")
    if text is None:
        text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
    return text
