"""A TCP proxy on loopback, for tests that need the path between client and server to misbehave."""

from __future__ import annotations

import contextlib
import select
import threading
from collections.abc import Callable, Iterator
from socket import SHUT_RDWR, create_connection, create_server
from urllib.parse import urlsplit


@contextlib.contextmanager
def loopback_proxy(
    upstream: str,
    *,
    idle_s: float | None = None,
    refuse: Callable[[bytes], bool] = lambda first_bytes: False,
    drop_reused: bool = False,
) -> Iterator[str]:
    """A TCP proxy to `upstream`; yields the URL that reaches it. It drops a connection once no
    byte has crossed it either way for `idle_s` (as load balancers and NAT gateways do), and one
    whose first bytes from the client `refuse` turns down, before they reach the server. With
    `drop_reused`, it drops a connection on which the client sends again after an answer, before
    those bytes reach the server (as a server closing an idle connection as a request arrives)."""
    target = urlsplit(upstream)
    listener = create_server(("127.0.0.1", 0))

    def relay(client) -> None:
        with client, create_connection((target.hostname, target.port)) as server:
            other, first, answered = {client: server, server: client}, True, False
            while ready := select.select(list(other), [], [], idle_s)[0]:  # nothing ready: idle, drop both
                for end in ready:
                    if not (data := end.recv(65536)):
                        return
                    if end is client and first:
                        first = False
                        if refuse(data):
                            return
                    if end is client and answered and drop_reused:
                        return
                    answered = answered or end is server
                    other[end].sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener was shut down
            while True:
                threading.Thread(target=relay, args=(listener.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.shutdown(SHUT_RDWR)  # wakes the accept
        listener.close()
