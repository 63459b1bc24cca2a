"""The client's session against a server that misbehaves on the wire (a real WebSocket server on
loopback, not corral's): each failure is the error that says what happened, and the next request
starts over on a new socket rather than read a late reply meant for the last one."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from websockets.asyncio.server import ServerConnection, serve

from corral.client.session import Session
from corral.errors import CapacityError, ReplyTimeout, ServerError, ServerUnreachable, SessionLost
from corral.protocol.frames import EpisodeState, ErrorCode, ErrorReply, StateReply, StateRequest

REPLY = StateReply(data=EpisodeState()).model_dump_json()


class WireServer:
    """A WebSocket server on loopback, in a thread of its own, answering the n-th frame of the
    whole run as `behaviour(n)` says: "reply", "silent", "garbage", "close" or "full"; with
    `refuse_first`, its first socket gets a refusal and is closed before any frame is read."""

    def __init__(self, behaviour: Callable[[int], str], *, refuse_first: bool = False):
        self.behaviour = behaviour
        self.refuse_first = refuse_first
        self.frames = 0
        self.connections = 0
        self.closed = 0  # sockets the client closed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    async def _start(self) -> str:
        self._server = await serve(self._answer, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _answer(self, socket: ServerConnection) -> None:
        self.connections += 1
        if self.refuse_first and self.connections == 1:
            await socket.send(ErrorReply.of(ErrorCode.CAPACITY_REACHED, "full", max_sessions=1).model_dump_json())
            await socket.close()
            return
        try:
            await self._play(socket)
        finally:
            self.closed += 1

    async def _play(self, socket: ServerConnection) -> None:
        async for _ in socket:
            self.frames += 1
            match self.behaviour(self.frames):
                case "reply":
                    await socket.send(REPLY)
                case "garbage":
                    await socket.send('{"type": "observation", "data": 7}')
                case "full":
                    await socket.send(
                        ErrorReply.of(ErrorCode.CAPACITY_REACHED, "full", max_sessions=2).model_dump_json()
                    )
                case "close":
                    await socket.close()
                    return
                case "silent":
                    pass

    def stop(self) -> None:
        async def shut() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def wire() -> Iterator[Callable[..., WireServer]]:
    started: list[WireServer] = []

    def start(behaviour: Callable[[int], str], **options: bool) -> WireServer:
        started.append(WireServer(behaviour, **options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def next_request_opens_a_new_socket(session: Session, server: WireServer) -> None:
    assert isinstance(session.request(StateRequest(), timeout_s=5), StateReply)
    assert server.connections == 2
    session.close()


def first_then_replies(first: str) -> Callable[[int], str]:
    return lambda n: first if n == 1 else "reply"


def test_a_reply_later_than_the_request_allows_is_a_reply_timeout_and_the_next_request_opens_a_new_socket(wire):
    server = wire(first_then_replies("silent"))
    session = Session(server.url)
    with pytest.raises(ReplyTimeout, match=rf"the server at {server.url} did not answer within 0.5s"):
        session.request(StateRequest(), timeout_s=0.5)
    assert isinstance(session.request(StateRequest(), timeout_s=5), StateReply)
    assert (server.connections, server.closed) == (2, 1)  # the late socket was closed, not left open
    session.close()


@pytest.mark.parametrize("sent_after_the_close", [False, True], ids=["sent-first", "sent-after-the-close"])
def test_a_refusal_the_server_sends_as_it_closes_a_new_socket_is_the_error_raised(
    wire, monkeypatch, sent_after_the_close
):
    server = wire(lambda n: "reply", refuse_first=True)
    if sent_after_the_close:  # a busy client: the close is in before the first frame goes, and sending fails
        connected, sockets = Session._connected, []

        async def closed_before_the_first_send(self: Session):
            sockets.append(await connected(self))
            if len(sockets) == 1:
                await sockets[0].wait_closed()
            return sockets[-1]

        monkeypatch.setattr(Session, "_connected", closed_before_the_first_send)
    session = Session(server.url)
    with pytest.raises(CapacityError, match="at its limit of 1 sessions at once"):
        session.request(StateRequest(), timeout_s=5)
    assert isinstance(session.request(StateRequest(), timeout_s=5), StateReply)
    session.close()


def test_a_socket_the_server_closes_mid_request_is_a_lost_session(wire):
    server = wire(first_then_replies("close"))
    session = Session(server.url)
    with pytest.raises(SessionLost, match=rf"the server at {server.url} closed the session") as lost:
        session.request(StateRequest(), timeout_s=5)
    assert not isinstance(lost.value, ReplyTimeout)
    next_request_opens_a_new_socket(session, server)


def test_a_frame_the_client_cannot_read_is_an_invalid_reply_and_the_socket_is_dropped(wire):
    server = wire(first_then_replies("garbage"))
    session = Session(server.url)
    with pytest.raises(ServerError, match="sent a frame corral cannot read") as refused:
        session.request(StateRequest(), timeout_s=5)
    assert refused.value.code == "INVALID_REPLY"
    next_request_opens_a_new_socket(session, server)


def test_a_full_server_is_a_capacity_error_saying_how_to_make_room_and_the_socket_is_dropped(wire):
    server = wire(first_then_replies("full"))
    session = Session(server.url)
    with pytest.raises(CapacityError, match="at its limit of 2 sessions at once") as full:
        session.request(StateRequest(), timeout_s=5)
    assert full.value.code == ErrorCode.CAPACITY_REACHED and full.value.data["max_sessions"] == 2
    next_request_opens_a_new_socket(session, server)


def test_closing_a_session_tells_the_server_and_a_closed_session_opens_a_new_socket_when_used(wire):
    server = wire(lambda n: "reply")
    session = Session(server.url)
    assert isinstance(session.request(StateRequest(), timeout_s=5), StateReply)
    session.close()
    assert server.frames == 2  # the state request, then the close frame
    next_request_opens_a_new_socket(session, server)


def test_a_server_not_there_or_gone_before_its_handshake_answer_is_unreachable():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def hang_up() -> None:  # takes the connection, and closes it before any answer
            connection, _ = listener.accept()
            connection.close()

        threading.Thread(target=hang_up, daemon=True).start()
        session = Session(url)
        with pytest.raises(ServerUnreachable, match=rf"could not reach a corral server at {url}"):
            session.request(StateRequest(), timeout_s=5)
    with pytest.raises(ServerUnreachable, match=rf"could not reach a corral server at {url}"):  # nothing listens now
        session.request(StateRequest(), timeout_s=5)
    session.close()
