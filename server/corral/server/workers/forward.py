"""Sessions created over HTTP on a host of several workers (`corral serve --workers N`): a
request that reaches a worker other than the one holding its session is passed to that worker
over its private Unix socket, and the answer passed back unchanged.

A session's id names its worker (WorkerSeat.mint). `POST /mcp` naming another worker's session
goes there whole (body, content type, token: the holder checks the token again) and its answer
(status, headers, body) comes back; `/ws?session_id=` naming one is joined to a socket on that
worker, frame for frame, until either side closes. A worker that does not answer (it died, and
its sessions with it) leaves the request to this worker, which answers it as an unknown session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlencode

import httpx
from fastapi import WebSocket, WebSocketDisconnect
from starlette.requests import Request
from starlette.responses import Response
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from corral.server.workers.seat import WorkerSeat

log = logging.getLogger("corral.server")

CONNECT_TIMEOUT_S = 10.0  # a tool call may take as long as its deadline: only the connect is bounded
PASSED_ON = ("authorization", "content-type")  # what the holder needs of the request's headers
# Headers of the holder's answer that describe its connection, not the answer: this worker's own go out instead.
OWN_HEADERS = {"connection", "content-length", "date", "keep-alive", "server", "transfer-encoding"}
GONE_CLOSE_CODE = 1011  # the holder's socket dropped without a close frame: it died mid-episode
GONE_REASON = "the worker holding this session ended"
NOT_SENDABLE = {1005, 1006, 1015}  # close codes that say what a socket saw, never sent in a close frame


class Forwarder:
    """Passes this worker's requests for other workers' sessions on to them (one per worker of `seat`)."""

    def __init__(self, seat: WorkerSeat):
        self.seat = seat
        # One pooled client per worker, made at its first request: a client's making (its TLS
        # context, unused here) costs about 40 ms, ten times a tool call.
        self._clients: dict[int, httpx.AsyncClient] = {}

    async def post(self, session_id: object, request: Request, body: bytes) -> Response | None:
        """The answer of the worker holding `session_id` to `request` (whose body is `body`); None
        when this worker answers it (the session is its own, or no other worker answers)."""
        if (holder := self.seat.holder(session_id)) is None:
            return None
        headers = {name: request.headers[name] for name in PASSED_ON if name in request.headers}
        try:
            answer = await self.peer_client(holder).post(
                f"http://worker{request.url.path}", content=body, headers=headers
            )
        except httpx.HTTPError as error:
            log.info("worker %d did not answer a request for its session: %s", holder, error)
            return None
        kept = {name: value for name, value in answer.headers.items() if name.lower() not in OWN_HEADERS}
        return Response(answer.content, answer.status_code, headers=kept)

    def peer_client(self, holder: int) -> httpx.AsyncClient:
        """The pooled client of worker `holder`'s private socket (also /metrics', workers.metrics)."""
        if holder not in self._clients:  # a connection left by a worker that died is dropped from the pool, not reused
            transport = httpx.AsyncHTTPTransport(uds=self.seat.socket_path(holder))
            self._clients[holder] = httpx.AsyncClient(
                transport=transport, trust_env=False, timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
            )
        return self._clients[holder]

    async def socket(self, websocket: WebSocket) -> bool:
        """Join `websocket` to a socket on the worker holding its `?session_id=`; False (the client's
        socket untouched) when this worker serves it (the session is its own, or no other worker answers)."""
        session_id = websocket.query_params.get("session_id")
        if session_id is None or (holder := self.seat.holder(session_id)) is None:
            return False
        headers = {name: websocket.headers[name] for name in PASSED_ON if name in websocket.headers}
        uri = f"ws://worker/ws?{urlencode({'session_id': session_id})}"
        try:
            # No size limit: this worker's server already bounds what the client sends, and the holder is trusted.
            peer = await unix_connect(
                self.seat.socket_path(holder),
                uri,
                additional_headers=headers,
                compression=None,
                max_size=None,
                ping_interval=None,
                open_timeout=CONNECT_TIMEOUT_S,
                proxy=None,
            )
        except (OSError, InvalidHandshake, TimeoutError) as error:
            log.info("worker %d did not answer a socket for its session: %s", holder, error)
            return False
        await _join(websocket, peer)
        return True

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self._clients.values()))


async def _join(websocket: WebSocket, peer: ClientConnection) -> None:
    """Frames both ways until either side closes."""
    await websocket.accept()
    async with peer:
        to_peer = asyncio.create_task(_to_peer(websocket, peer))
        to_client = asyncio.create_task(_to_client(peer, websocket))
        await asyncio.wait({to_peer, to_client}, return_when=asyncio.FIRST_COMPLETED)
        for task in (to_peer, to_client):
            task.cancel()
        await asyncio.gather(to_peer, to_client, return_exceptions=True)


async def _to_peer(websocket: WebSocket, peer: ClientConnection) -> None:
    """The client's frames to the holder, until the client leaves (the holder then detaches the session)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text, data = message.get("text"), message.get("bytes")
        try:
            await peer.send(text if text is not None else data or b"")
        except ConnectionClosed:
            return await _close(websocket, GONE_CLOSE_CODE, GONE_REASON)


async def _to_client(peer: ClientConnection, websocket: WebSocket) -> None:
    """The holder's frames to the client, then its close (a holder that died closes with 1011)."""
    try:
        async for frame in peer:
            if isinstance(frame, str):
                await websocket.send_text(frame)
            else:
                await websocket.send_bytes(frame)
    except ConnectionClosed:
        return await _close(websocket, GONE_CLOSE_CODE, GONE_REASON)
    code = peer.close_code
    await _close(websocket, 1000 if code is None or code in NOT_SENDABLE else code, peer.close_reason or "")


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # the client may have left too
        await websocket.close(code, reason)
