"""Serving a bundle from inside another program: uvicorn on a free loopback port, in a thread.

`Bundle.local` uses this, so a notebook or a trainer gets a real server (the same frames, the
same deadlines) without a second terminal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from pathlib import Path

import uvicorn

from corral.errors import ServeFailed
from corral.server.app import create_app
from corral.server.served import ServedBundle, ServeOptions, default_instance

START_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 420.0  # a local server's sandboxes get time to tear down


class EmbeddedServer:
    """A running server; `url` reaches it, `stop()` tears every episode down and stops it."""

    def __init__(self, root: Path, options: ServeOptions, *, ws_ping_interval: float = 20.0,
                 ws_ping_timeout: float = 20.0):
        port = _free_port()
        if options.instance is None:  # the reaper's name for this server: its port makes it unique here
            options = dataclasses.replace(options, instance=default_instance(port))
        self.served = asyncio.run(ServedBundle.open(Path(root), options))  # raises BundleInvalid
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(
            create_app(self.served), host="127.0.0.1", port=port, log_level="warning",
            ws_ping_interval=ws_ping_interval, ws_ping_timeout=ws_ping_timeout,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"corral-server-{port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServeFailed(f"the embedded corral server for {root} did not start; see the log above")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(SHUTDOWN_TIMEOUT_S)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
