"""The relay upstream alone (corral.server.harness.socket_upstream), its socket a list of the
frames sent: what it sends, what it refuses, and which answers it takes."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, cast

import httpx
import pytest

from corral.protocol.harness.relay_frames import ModelRequest, ModelResponseData
from corral.server.harness.socket_upstream import WebSocketUpstream

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
HTTP = cast(httpx.AsyncClient, None)  # unused by the relay: the socket is its way out


class Socket:
    """The frames a relay sent."""

    def __init__(self) -> None:
        self.sent: list[ModelRequest] = []

    async def send(self, text: str) -> None:
        self.sent.append(ModelRequest.model_validate_json(text))


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The async test run on a loop of its own."""

    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return sync


def relay(socket: Socket, **limits: Any) -> WebSocketUpstream:
    upstream = WebSocketUpstream(socket.send, **limits)
    upstream.asked = True
    return upstream


def answer(upstream: WebSocketUpstream, request: ModelRequest, status: int = 200) -> None:
    upstream.answer(ModelResponseData(id=request.data.id, status=status, body={"n": request.data.body["n"]}))


@run
async def test_calls_past_the_limit_in_flight_are_refused_and_the_rest_answered():
    socket = Socket()
    upstream = relay(socket, max_in_flight=2, timeout_s=2)
    calls = [asyncio.create_task(upstream.complete({**BODY, "n": n}, HTTP)) for n in range(3)]
    await asyncio.sleep(0.01)
    status, refused = await calls[2]
    assert status == 429 and refused["error"]["code"] == "relay_busy"
    assert [request.data.body["n"] for request in socket.sent] == [0, 1]
    for request in reversed(socket.sent):  # answered out of order: matched by id
        answer(upstream, request)
    assert await asyncio.gather(*calls[:2]) == [(200, {"n": 0}), (200, {"n": 1})]


@run
async def test_a_slot_is_free_again_once_its_call_is_answered():
    socket = Socket()
    upstream = relay(socket, max_in_flight=1)
    first = asyncio.create_task(upstream.complete({**BODY, "n": 0}, HTTP))
    await asyncio.sleep(0.01)
    answer(upstream, socket.sent[0])
    await first
    second = asyncio.create_task(upstream.complete({**BODY, "n": 1}, HTTP))
    await asyncio.sleep(0.01)
    answer(upstream, socket.sent[1])
    assert await second == (200, {"n": 1})


@run
async def test_answers_are_matched_by_id_and_strays_are_ignored_and_logged(caplog: pytest.LogCaptureFixture):
    socket = Socket()
    upstream = relay(socket)
    call = asyncio.create_task(upstream.complete({**BODY, "n": 7}, HTTP))
    await asyncio.sleep(0.01)
    request = socket.sent[0]
    caplog.set_level(logging.INFO, logger="corral.server")
    upstream.answer(ModelResponseData(id="forged", status=200, body={"n": -1}))
    answer(upstream, request)
    answer(upstream, request, status=500)  # a duplicate: the first answer stands
    assert await call == (200, {"n": 7})
    answer(upstream, request, status=500)  # after the call: unknown now
    strays = [record.getMessage() for record in caplog.records if "which no call waits for" in record.getMessage()]
    assert [stray.split("'")[1] for stray in strays] == ["forged", request.data.id, request.data.id]


@run
async def test_a_request_over_the_frame_limit_is_refused_unsent():
    socket = Socket()
    upstream = relay(socket, max_frame_chars=1000, timeout_s=2)
    status, reply = await upstream.complete({**BODY, "messages": [{"role": "user", "content": "x" * 1000}]}, HTTP)
    assert status == 413 and reply["error"]["code"] == "request_too_large" and socket.sent == []


@run
async def test_a_call_the_client_does_not_answer_in_time_is_a_504():
    socket = Socket()
    upstream = relay(socket, timeout_s=0.05)
    status, reply = await upstream.complete({**BODY, "n": 0}, HTTP)
    assert status == 504 and "did not answer this model call within 0.05s" in reply["error"]["message"]
    answer(upstream, socket.sent[0])  # too late: nobody waits, nothing breaks


@run
async def test_a_relay_its_client_did_not_ask_for_sends_nothing():
    socket = Socket()
    upstream = WebSocketUpstream(socket.send, timeout_s=2)
    status, reply = await upstream.complete({**BODY, "n": 0}, HTTP)
    assert status == 502 and reply["error"]["code"] == "relay_not_asked" and socket.sent == []


@run
async def test_a_closed_relay_answers_waiting_and_later_calls_with_its_cause():
    socket = Socket()
    upstream = relay(socket, timeout_s=2)
    waiting = asyncio.create_task(upstream.complete({**BODY, "n": 0}, HTTP))
    await asyncio.sleep(0.01)
    upstream.close("the client left")
    assert await waiting == (
        502,
        {"error": {"message": "the client left", "type": "corral_capture", "code": "upstream_unreachable"}},
    )
    status, _ = await upstream.complete({**BODY, "n": 1}, HTTP)
    assert status == 502 and len(socket.sent) == 1


def test_a_proxy_on_another_loop_reaches_the_sockets():
    """The capture proxy may run on a server of its own: the frame still goes out on the
    socket's loop, and the answer comes back to the caller's."""
    socket = Socket()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def made() -> WebSocketUpstream:
        return relay(socket)

    upstream = asyncio.run_coroutine_threadsafe(made(), loop).result(5)

    async def caller() -> tuple[int, dict[str, Any]]:
        call = asyncio.create_task(upstream.complete({**BODY, "n": 5}, HTTP))
        while not socket.sent:
            await asyncio.sleep(0.01)
        loop.call_soon_threadsafe(answer, upstream, socket.sent[0])
        return await call

    try:
        assert asyncio.run(caller()) == (200, {"n": 5})
    finally:
        loop.call_soon_threadsafe(loop.stop)
