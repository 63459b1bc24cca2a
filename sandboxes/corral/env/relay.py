"""The model relay inside a sandbox: a harness's model calls leave the sandbox only through it.

A harness episode runs a CLI agent inside the sandbox and points it at
`http://127.0.0.1:PORT/v1`. Networking is off in a sandbox, so that address is the sandbox's own
loopback; the relay, started by corral's runtime in the sandbox, passes every connection's bytes
unchanged to a Unix socket that the server listens on, in a folder only this sandbox is given.
The server's capture answers there.

Nothing is parsed or trusted here: the server checks every request's key (one per episode),
holds the step limit and the token capture, so an agent that kills, floods or bypasses the relay
costs only its own calls. What the relay bounds is itself: connections at once, and an idle
connection's life.

Standard library only, as all of corral.env.
"""

from __future__ import annotations

import selectors
import socket
import threading

MAX_CONNECTIONS = 64  # a harness makes one or two at a time; more is a flood, refused at accept
IDLE_S = 600.0  # a connection silent both ways this long is closed (a model call takes minutes at most)
CHUNK = 64 * 1024


class Relay:
    """Listens on 127.0.0.1 (`port`, or a free one) and joins each connection to `socket_path`."""

    def __init__(self, socket_path: str, port: int = 0, max_connections: int = MAX_CONNECTIONS):
        self.socket_path = socket_path
        self.max_connections = max_connections
        self._listener = socket.create_server(("127.0.0.1", port), backlog=max_connections)
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._accepting = threading.Thread(target=self._accept, name="corral-relay", daemon=True)

    def start(self) -> int:
        """Start accepting; the port the harness is pointed at."""
        self._accepting.start()
        return self.port

    def close(self) -> None:
        """Stop accepting and end every open connection; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = list(self._open)
        _shut(self._listener)
        for connection in held:
            _shut(connection)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open) // 2

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.open_connections >= self.max_connections:
                _shut(client)  # a flood is refused before it costs the server a connection
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.socket_path)
            except OSError:
                _shut(client)  # the server is gone: the harness sees its call fail
                _shut(upstream)
                continue
            with self._lock:
                if not self._closed:
                    self._open.update((client, upstream))
                    threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
                    continue
            _shut(client)
            _shut(upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """Copy both ways until both have ended, passing each side's end of writing on."""
        peers = {client: upstream, upstream: client}
        reading = set(peers)
        with selectors.DefaultSelector() as selector:
            for side in peers:
                selector.register(side, selectors.EVENT_READ)
            try:
                while reading:
                    ready = selector.select(timeout=IDLE_S)
                    if not ready:
                        return  # idle both ways
                    for key, _ in ready:
                        source = key.fileobj
                        assert isinstance(source, socket.socket)
                        data = source.recv(CHUNK)
                        if data:
                            peers[source].sendall(data)
                            continue
                        selector.unregister(source)
                        reading.discard(source)
                        peers[source].shutdown(socket.SHUT_WR)
            except OSError:
                return  # either side went away
            finally:
                with self._lock:
                    self._open.difference_update(peers)
                for side in peers:
                    _shut(side)


def _shut(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected, or already shut
    connection.close()
