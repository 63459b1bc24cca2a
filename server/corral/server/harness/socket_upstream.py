"""The relay upstream: a harness episode's model calls answered by the client over the session's
own WebSocket, from the trainer's engine, so an env host needs no route to the GPU box.

Each call goes to the client as a `model_request` frame and is answered by the `model_response`
with its id (`corral.protocol.harness.relay_frames`). The socket's relay exists for every socket
(`serving/ws.py` makes it), but only sends when the client's latest reset asked for it
(`llm: "relay"`): an OpenEnv client that never asks never sees a `model_request`. Bounded: at
most `max_in_flight` calls wait on the client at once (more: 429, which the agent's SDK
retries), a request's frame at most `max_frame_chars` (413), each answered within `timeout_s`
(504); a client gone answers every waiting call 502 with the cause.

A harness episode gets the relay of the socket its call came over:

    upstream = session_relay()          # None: the client did not ask; use llm_url, or refuse
    episode = proxy.open_episode(upstream, episode_id=..., temperature=...)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import httpx

from corral.protocol.harness.relay_frames import ModelRequest, ModelRequestData, ModelResponseData
from corral.server.harness.capture import error_body

log = logging.getLogger("corral.server")
MAX_IN_FLIGHT = 16  # calls waiting on one client at once (an agent's parallel calls, sub-agents)
MAX_FRAME_CHARS = 8 * 1024 * 1024  # a request's frame (a long chat with its tools): the client takes 100 MiB
TIMEOUT_S = 600.0  # as HttpUpstream's: a long generation on a busy engine

_SOCKET_RELAY: ContextVar[WebSocketUpstream | None] = ContextVar("corral_socket_relay", default=None)


def session_relay() -> WebSocketUpstream | None:
    """The relay of the socket the running frame came over, when its client asked for it at its
    latest reset; else None (a client that did not ask, a call over `POST /mcp`)."""
    relay = _SOCKET_RELAY.get()
    return relay if relay is not None and relay.asked else None


class WebSocketUpstream:
    """An `Upstream` answered by the client of one socket, `send` sending a frame's text on it.
    Made on the socket's loop; the capture proxy may call it from another (its own server's)."""

    model: str | None = None  # the client names its engine's model (its llm_model), not the server

    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_frame_chars: int = MAX_FRAME_CHARS,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._waiting: dict[str, asyncio.Future[tuple[int, dict[str, Any]]]] = {}
        self._ids = itertools.count(1)
        self.max_in_flight = max_in_flight
        self.max_frame_chars = max_frame_chars
        self.timeout_s = timeout_s
        self.asked = False  # set at each reset: whether its client asked for the relay
        self._gone: str | None = None  # why no call is answered any more

    def bind(self) -> None:
        """Make this the relay `session_relay()` finds in the calling task and those it starts."""
        _SOCKET_RELAY.set(self)

    async def complete(self, body: dict[str, Any], http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        if asyncio.get_running_loop() is self._loop:
            return await self._complete(body)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._complete(body), self._loop))

    async def _complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self._gone is not None:
            return 502, error_body(self._gone, "upstream_unreachable")
        if not self.asked:
            return 502, error_body(
                "this session's client did not ask for the relay at its reset: it answers no model calls "
                '(reset with llm: "relay", as corral\'s client made with llm_url= does)',
                "relay_not_asked",
            )
        if len(self._waiting) >= self.max_in_flight:
            return 429, error_body(
                f"{len(self._waiting)} model calls already wait on this session's client, the most its relay "
                "carries at once: retry when one is answered",
                "relay_busy",
            )
        request = ModelRequest(data=ModelRequestData(id=f"m{next(self._ids)}", body=body))
        frame = request.model_dump_json()
        if len(frame) > self.max_frame_chars:
            return 413, error_body(
                f"the request is {len(frame)} characters as a relay frame, over the relay's {self.max_frame_chars}: "
                "compact the conversation, or serve the engine where the env host reaches it (llm_url)",
                "request_too_large",
            )
        answered = self._loop.create_future()
        self._waiting[request.data.id] = answered
        try:
            await self._send(frame)
            async with asyncio.timeout(self.timeout_s):
                return await answered
        except TimeoutError:
            return 504, error_body(
                f"the client did not answer this model call within {self.timeout_s:g}s: is the engine it was "
                "given (llm_url) serving, and its process still running?",
                "upstream_timeout",
            )
        except Exception as error:  # noqa: BLE001 - a socket that failed as the frame went out
            return 502, error_body(f"the model call could not be sent to the client: {error!r}", "upstream_unreachable")
        finally:
            self._waiting.pop(request.data.id, None)

    def answer(self, response: ModelResponseData) -> None:
        """The client's answer: to the waiting call with its id; any other is ignored."""
        waiting = self._waiting.get(response.id)
        if waiting is None or waiting.done():
            log.info(
                "relay: a model_response for %r, which no call waits for (unknown, answered or given up)", response.id
            )
            return
        waiting.set_result((response.status, response.body))

    def close(self, cause: str) -> None:
        """The socket has ended: every waiting call, and every later one, is answered 502 with `cause`."""
        self._gone = cause
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_result((502, error_body(cause, "upstream_unreachable")))
