"""One WebSocket session on a corral server, with a synchronous API.

Every session's socket lives on one background event loop, so:
- synchronous calls work from any thread, a Jupyter cell's running loop included;
- while the caller is busy for minutes (a trainer generating), that loop still answers the
  server's keepalive pings, and the session and its episode survive;
- while a frame waits for its reply, the loop answers the model calls a harness episode's
  agent makes meanwhile (relay mode, with `llm_url`: docs/protocol.md), each as it comes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from corral.client.hosts import Hosts
from corral.client.relay_engine import RelayEngine
from corral.client.urls import base_urls, ws_url
from corral.errors import (
    CapacityError,
    ReplyTimeout,
    ServerError,
    ServerUnreachable,
    SessionLost,
    TokenMissing,
    TokenRefused,
)
from corral.protocol.frames import (
    SERVER_FRAMES,
    CloseRequest,
    ErrorCode,
    ErrorReply,
    JsonRpcRequest,
    ResetRequest,
    ServerFrame,
)
from corral.protocol.harness.relay_frames import ModelRequest, ModelRequestData

T = TypeVar("T")
MAX_MESSAGE_BYTES = 100 * 1024 * 1024
CLOSE_TIMEOUT_S = 30.0
log = logging.getLogger("corral.client")


class _LoopThread:
    """The daemon thread whose event loop runs every session's socket."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coroutine: Coroutine[Any, Any, T]) -> T:
        return cls.submit(coroutine).result()

    @classmethod
    def submit(cls, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, name="corral-client-loop", daemon=True).start()
            loop = cls._loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop)


class Session:
    """A session on the server at `url`: one episode at a time. Connects on first use.

    `url` may name several env hosts serving the same bundle, separated by commas: the session
    then opens on the one with the most room, and may move at a reset (see hosts.py); `url`
    is then the host it is on.

    `session_id` attaches to a session the server already holds (a fork's copy, or one made by
    `openenv/session/create`): it outlives a dropped socket, and `close` ends it over `POST /mcp`.

    `llm_url`: the trainer's engine (OpenAI-compatible, e.g. vLLM's `http://gpu-box:8000`),
    serving `llm_model`. Each reset then asks for the relay, and the model calls of a harness
    episode's agent come over this session's socket to be answered from that engine."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        keepalive_s: float = 20.0,
        session_id: str | None = None,
        llm_url: str | None = None,
        llm_model: str | None = None,
    ):
        urls = base_urls(url)
        self.url = urls[0]
        self._hosts = Hosts.of(urls, token) if len(urls) > 1 and session_id is None else None
        self._token = token
        self._keepalive_s = keepalive_s
        self.session_id = session_id
        self._socket: ClientConnection | None = None
        self._engine = RelayEngine(llm_url, llm_model) if llm_url is not None else None
        self._answering: set[asyncio.Task[None]] = set()  # model calls being answered

    def attached(self, session_id: str) -> Session:
        """A session on this one's host, with its token and engine, attached to the server's `session_id`."""
        engine = self._engine
        return Session(
            self.url,
            token=self._token,
            keepalive_s=self._keepalive_s,
            session_id=session_id,
            llm_url=engine.url if engine is not None else None,
            llm_model=engine.model if engine is not None else None,
        )

    def request(self, frame: BaseModel, timeout_s: float) -> ServerFrame:
        """Send one frame and return the server's reply.

        Raises `ServerError` (or `CapacityError`) for an error frame, `SessionLost` (or
        `ReplyTimeout`) when the socket closes or the reply is late, `ServerUnreachable`,
        `TokenMissing` and `TokenRefused` when no session can be opened."""
        return _LoopThread.run(self._request(frame, timeout_s))

    def close(self) -> None:
        """Tell the server to end the session (it tears the episode down) and drop the socket."""
        if self._socket is not None or self.session_id is not None:
            _LoopThread.run(self._close())

    def close_in_background(self) -> None:
        """Like close, without waiting: for an environment being garbage-collected."""
        if self._socket is not None or self.session_id is not None:
            _LoopThread.submit(self._close())

    async def _request(self, frame: BaseModel, timeout_s: float) -> ServerFrame:
        if isinstance(frame, ResetRequest) and self._engine is not None:
            frame = ResetRequest(data=frame.data.model_copy(update={"llm": "relay"}))
        if self._hosts is not None and isinstance(frame, ResetRequest):
            return await self._reset_on_a_host(frame, timeout_s)
        try:
            return await self._exchange(frame, timeout_s)
        except SessionLost as error:
            if self._hosts is not None and not isinstance(error, ReplyTimeout):
                self._hosts.lost(self.url)
            raise
        except ServerUnreachable:
            if self._hosts is not None:
                self._hosts.lost(self.url)
            raise

    async def _reset_on_a_host(self, frame: ResetRequest, timeout_s: float) -> ServerFrame:
        """A reset starts an episode: the moment a session may move to the host with the most
        room. A host whose server went away before the episode started is left for another."""
        assert self._hosts is not None
        tried: set[str] = set()
        while True:
            here = self.url if self._socket is not None and self._socket.state is State.OPEN else None
            best = await asyncio.to_thread(self._hosts.pick, here, avoid=frozenset(tried))
            if best != here:
                await self._close()  # the old host ends this session's episode and sandbox
                self.url = best
            try:
                return await self._exchange(frame, timeout_s)
            except (ServerUnreachable, SessionLost) as error:
                if isinstance(error, ReplyTimeout):  # a slow reset, not a lost host
                    raise
                self._hosts.lost(self.url)
                tried.add(self.url)

    async def _exchange(self, frame: BaseModel, timeout_s: float) -> ServerFrame:
        socket = await self._connected()
        try:
            await socket.send(frame.model_dump_json())
        except ConnectionClosed:
            pass  # a refusal the server sent before closing is still waiting to be read
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                text = await asyncio.wait_for(socket.recv(), deadline - loop.time())
            except (TimeoutError, ConnectionClosed) as error:
                # A late reply would answer the next request: start over on a new socket instead.
                await self._drop()
                if isinstance(error, TimeoutError):
                    raise ReplyTimeout(f"the server at {self.url} did not answer within {timeout_s:g}s") from None
                raise SessionLost(f"the server at {self.url} closed the session: {error}") from None
            try:
                reply = SERVER_FRAMES.validate_json(text)
            except ValidationError as error:
                await self._drop()
                raise ServerError(
                    "INVALID_REPLY", f"the server at {self.url} sent a frame corral cannot read: {error}"
                ) from None
            if not isinstance(reply, ModelRequest):
                break
            self._answer_model_call(socket, reply.data)
        if isinstance(reply, ErrorReply):
            data = reply.data
            extra = data.model_dump(exclude={"message", "code"})
            if data.code == ErrorCode.CAPACITY_REACHED:
                await self._drop()
                raise CapacityError(data.code, capacity_message(self.url, extra.get("max_sessions")), extra)
            raise ServerError(data.code, data.message, extra)
        return reply

    def _answer_model_call(self, socket: ClientConnection, request: ModelRequestData) -> None:
        """Answer the server's model call from the engine, while the reply is still awaited."""
        if self._engine is None:  # never asked for: the server sends none without the reset's llm
            log.warning("the server at %s sent a model call to a session made without llm_url: ignored", self.url)
            return
        task = asyncio.create_task(self._answer(socket, self._engine, request))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    @staticmethod
    async def _answer(socket: ClientConnection, engine: RelayEngine, request: ModelRequestData) -> None:
        response = await engine.answer(request)
        with contextlib.suppress(ConnectionClosed):  # the session ended meanwhile: nobody waits for it
            await socket.send(response.model_dump_json())

    async def _connected(self) -> ClientConnection:
        if self._socket is not None and self._socket.state is not State.OPEN:
            await self._drop()  # the far end closed it while idle (a restart, a keepalive timeout): open another
        if self._socket is None:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
            query = "" if self.session_id is None else f"?session_id={self.session_id}"
            try:
                self._socket = await connect(
                    ws_url(self.url) + query,
                    additional_headers=headers,
                    max_size=MAX_MESSAGE_BYTES,
                    ping_interval=self._keepalive_s,
                    ping_timeout=self._keepalive_s,
                    proxy=None,
                )
            except InvalidStatus as error:
                raise refusal(self.url, error.response.status_code) from None
            except (
                OSError,
                InvalidHandshake,
            ) as error:  # InvalidHandshake: the connection died before the server's answer
                raise ServerUnreachable(f"could not reach a corral server at {self.url}: {error}") from None
        return self._socket

    async def _close(self) -> None:
        if self.session_id is not None:  # a close frame would only detach it: the server ends it on close
            await self._close_attached(self.session_id)
            return
        if self._socket is not None:
            try:
                await self._socket.send(CloseRequest().model_dump_json())
            except ConnectionClosed:
                pass
            await self._drop()

    async def _close_attached(self, session_id: str) -> None:
        """`openenv/session/close` over `POST /mcp`, then the socket dropped: the server ends
        the session once its socket has left (at once when none is attached)."""
        request = JsonRpcRequest(jsonrpc="2.0", method="openenv/session/close", params={"session_id": session_id})
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            async with httpx.AsyncClient(headers=headers, timeout=CLOSE_TIMEOUT_S, trust_env=False) as client:
                await client.post(f"{self.url}/mcp", json=request.model_dump())
        except httpx.HTTPError as error:  # the server is gone, and the session with it, or it ends it unattached
            log.info("closing session %s at %s: %s", session_id, self.url, error)
        finally:
            self.session_id = None
            await self._drop()

    async def _drop(self) -> None:
        socket, self._socket = self._socket, None
        for task in list(self._answering):  # their answers have no socket to go to
            task.cancel()
        if socket is not None:
            await socket.close()
        if self._engine is not None:
            await self._engine.aclose()


def refusal(url: str, status: int) -> Exception:
    """The error for a server that refused a request or a session with HTTP `status`."""
    if status == 401:
        return TokenMissing(url)
    if status == 403:
        return TokenRefused(url)
    return SessionLost(f"the server at {url} refused the session with HTTP {status}")


def capacity_message(url: str, limit: int | None) -> str:
    return (
        f"the server at {url} is at its limit of {limit} sessions at once, and the trainer holds one "
        "per rollout it generates at once: serve the bundle with --max-concurrent-envs (or "
        "max_concurrent_envs=) at least that many, generate fewer rollouts at once, or wait for a "
        "free session with Bundle(..., capacity_wait=SECONDS)"
    )
