"""The model relay a harness's calls leave the sandbox through (corral.env.relay): bytes pass
unchanged both ways, each side's end of writing is passed on, and the relay bounds itself."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.env.relay import Relay


def _serve_unix(path: Path, handle: Callable[[socket.socket], None]) -> socket.socket:
    """A Unix socket server at `path` (the server's side of the relay) handling each connection."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _answers_what_it_read(connection: socket.socket) -> None:
    with connection:
        connection.sendall(b"got:" + _read_all(connection))


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[tuple[Relay, Path]]:
    path = tmp_path / "model.sock"
    relay = Relay(str(path), max_connections=2)
    relay.start()
    yield relay, path
    relay.close()


def _connect(relay: Relay) -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.port), timeout=10)


def test_a_request_passes_unchanged_and_its_answer_comes_back_after_the_request_ends(relayed):
    relay, path = relayed
    listener = _serve_unix(path, _answers_what_it_read)
    body = b"POST /v1/chat/completions HTTP/1.1\r\n\r\n" + bytes(range(256)) * 1024  # past one chunk
    with listener, _connect(relay) as client:
        client.sendall(body)
        client.shutdown(socket.SHUT_WR)  # the server reads to its end, then answers
        assert _read_all(client) == b"got:" + body


def test_it_listens_on_the_sandboxes_own_loopback_only(relayed):
    relay, _ = relayed
    assert relay._listener.getsockname()[0] == "127.0.0.1"


def test_connections_past_its_bound_are_refused_at_once_and_the_held_ones_go_on(relayed):
    relay, path = relayed
    release = threading.Event()

    def holds(connection: socket.socket) -> None:
        with connection:
            release.wait(10)
            connection.sendall(b"late answer")

    listener = _serve_unix(path, holds)
    with listener, _connect(relay) as first, _connect(relay) as second:
        first.sendall(b"a")
        second.sendall(b"b")
        for _ in range(200):  # until both are joined (the relay accepts on its own thread)
            if relay.open_connections == 2:
                break
            threading.Event().wait(0.01)
        with _connect(relay) as third:
            assert third.recv(10) == b""  # closed by the relay, never passed to the server
        release.set()
        assert first.recv(100) == b"late answer" and second.recv(100) == b"late answer"


def test_closing_the_relay_ends_its_open_connections(relayed):
    relay, path = relayed
    listener = _serve_unix(path, lambda connection: threading.Event().wait(10))
    with listener, _connect(relay) as client:
        client.sendall(b"a call that never gets its answer")
        for _ in range(200):
            if relay.open_connections == 1:
                break
            threading.Event().wait(0.01)
        relay.close()
        assert _read_all(client) == b""
        with pytest.raises(OSError):
            _connect(relay)


def test_a_server_that_is_gone_fails_the_call_at_once(relayed):
    relay, _ = relayed  # nothing listens at the socket's path
    with _connect(relay) as client:
        assert client.recv(10) == b""
