"""One WebSocket session on a corral server, with a synchronous API.

Every session's socket lives on one background event loop, so:
- synchronous calls work from any thread, a Jupyter cell's running loop included;
- while the caller is busy for minutes (a trainer generating), that loop still answers the
  server's keepalive pings, and the session and its episode survive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from corral.client.protocol import ErrorCode

T = TypeVar("T")
MAX_MESSAGE_BYTES = 100 * 1024 * 1024


class ServerError(RuntimeError):
    """The server answered a frame with an `error` frame."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None):
        super().__init__(f"{message} (code: {code})")
        self.code = code
        self.data = data or {}


class CapacityError(ServerError):
    """The server is at its session limit."""


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


def ws_url(url: str) -> str:
    """`http://host:8000` -> `ws://host:8000/ws` (and https -> wss)."""
    base = url.rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if base.startswith(http):
            base = ws + base[len(http):]
    if not base.startswith(("ws://", "wss://")):
        base = "ws://" + base
    return base + "/ws"


class Session:
    """A session on the server at `url`: one episode at a time. Connects on first use."""

    def __init__(self, url: str, *, token: str | None = None, keepalive_s: float = 20.0):
        self.url = url.rstrip("/")
        self._token = token
        self._keepalive_s = keepalive_s
        self._socket: ClientConnection | None = None

    def request(self, frame: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one frame and return the server's reply; raise ServerError for an error frame."""
        return _LoopThread.run(self._request(frame, timeout_s))

    def close(self) -> None:
        """Tell the server to end the session (it tears the episode down) and drop the socket."""
        if self._socket is not None:
            _LoopThread.run(self._close())

    def close_in_background(self) -> None:
        """Like close, without waiting: for an environment being garbage-collected."""
        if self._socket is not None:
            _LoopThread.submit(self._close())

    async def _request(self, frame: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        socket = await self._connected()
        try:
            await socket.send(json.dumps(frame))
        except ConnectionClosed:
            pass  # a refusal the server sent before closing is still waiting to be read
        try:
            text = await asyncio.wait_for(socket.recv(), timeout_s)
        except (TimeoutError, ConnectionClosed) as error:
            # A late reply would answer the next request: start over on a new socket instead.
            await self._drop()
            if isinstance(error, TimeoutError):
                raise TimeoutError(f"the server at {self.url} did not answer within {timeout_s:g}s") from None
            raise ConnectionError(f"the server at {self.url} closed the session: {error}") from None
        reply = json.loads(text)
        if reply.get("type") == "error":
            data = reply.get("data", {})
            code = data.get("code", "")
            if code == ErrorCode.CAPACITY_REACHED:
                await self._drop()
                raise CapacityError(code, capacity_message(self.url, data.get("max_sessions")), data)
            raise ServerError(code, data.get("message", ""), data)
        return reply

    async def _connected(self) -> ClientConnection:
        if self._socket is None:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
            try:
                self._socket = await connect(
                    ws_url(self.url), additional_headers=headers, max_size=MAX_MESSAGE_BYTES,
                    ping_interval=self._keepalive_s, ping_timeout=self._keepalive_s, proxy=None,
                )
            except InvalidStatus as error:
                raise ConnectionError(f"the server at {self.url} refused the session: {error}") from None
            except OSError as error:
                raise ConnectionError(f"could not reach a corral server at {self.url}: {error}") from None
        return self._socket

    async def _close(self) -> None:
        if self._socket is not None:
            try:
                await self._socket.send(json.dumps({"type": "close"}))
            except ConnectionClosed:
                pass
            await self._drop()

    async def _drop(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()


def capacity_message(url: str, limit: int | None) -> str:
    return (
        f"the server at {url} is at its limit of {limit} sessions at once, and the trainer holds one "
        "per rollout it generates at once: serve the bundle with --max-concurrent-envs (or "
        "max_concurrent_envs=) at least that many, or generate fewer rollouts at once"
    )
