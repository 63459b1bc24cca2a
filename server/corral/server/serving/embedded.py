"""Serving a bundle from inside another program: uvicorn on a free loopback port, in a thread.

`Bundle.local` uses this, so a notebook or a trainer gets a real server (the same frames, the
same deadlines) without a second terminal.

The bundle is opened and served on one background thread with an event loop of its own, so
the caller's thread is never asked to run a loop: a script, a Jupyter cell (whose thread
already runs one), another thread and a spawned process all start it the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import socket
import threading
from pathlib import Path

import uvicorn

from corral.errors import ServeFailed
from corral.server.serving.app import create_app, socket_settings
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle, default_instance

START_TIMEOUT_S = 60.0  # from the bundle being open (images built, envs probed) to accepting sessions
SHUTDOWN_TIMEOUT_S = 420.0  # a local server's sandboxes get time to tear down


class EmbeddedServer:
    """A running server; `url` reaches it, `stop()` tears every episode down and stops it.

    Raises what opening the bundle raised (`BundleInvalid` for a broken bundle, `ConfigError`
    for a sandbox that cannot be had), or `ServeFailed` when the server does not start."""

    def __init__(
        self, root: Path, options: ServeOptions, *, ws_ping_interval: float = 20.0, ws_ping_timeout: float = 20.0
    ):
        port = _free_port()
        if options.instance is None:  # the reaper's name for this server: its port makes it unique here
            options = dataclasses.replace(options, instance=default_instance(port))
        self.url = f"http://127.0.0.1:{port}"
        self.served: ServedBundle | None = None
        self._root = Path(root)
        self._server: uvicorn.Server | None = None
        self._opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopping = threading.Event()
        config = {
            "host": "127.0.0.1",
            "port": port,
            "log_level": "warning",
            "timeout_graceful_shutdown": 5,
            "ws_ping_interval": ws_ping_interval,
            "ws_ping_timeout": ws_ping_timeout,
        }
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(options, config),), name=f"corral-server-{port}", daemon=True
        )
        self._thread.start()
        try:
            self._opened.result()  # no deadline: building a bundle's images may take minutes
            self._started.result(START_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            self.stop()
            raise ServeFailed(
                f"the embedded corral server for {root} did not start within {START_TIMEOUT_S:.0f}s; see the log above"
            ) from None
        except BaseException:  # a broken bundle, or Ctrl-C while it opens: nothing is left running
            self.stop()
            raise

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(SHUTDOWN_TIMEOUT_S)

    async def _serve(self, options: ServeOptions, config: dict) -> None:
        """The background thread's whole life: open the bundle, serve it until stopped."""
        try:
            self.served = await ServedBundle.open(self._root, options)  # raises BundleInvalid
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self._opened.set_exception(error)
            return
        self._opened.set_result(None)
        if self._stopping.is_set():  # the caller gave up while the bundle was opening
            await self.served.aclose()
            return
        self._server = server = uvicorn.Server(
            uvicorn.Config(create_app(self.served), **config, **socket_settings(self.served))
        )
        server.should_exit = self._stopping.is_set()  # a stop() that came before self._server was set
        announcer = asyncio.create_task(_announce_start(server, self._started))
        try:
            await server.serve()
        except BaseException as error:  # noqa: BLE001 - uvicorn exits (SystemExit) when it cannot bind its port
            if not self._started.done():
                self._started.set_exception(
                    ServeFailed(
                        f"the embedded corral server for {self._root} did not start: {error!r}; see the log above"
                    )
                )
        finally:
            announcer.cancel()
            if not self._started.done():
                self._started.set_exception(
                    ServeFailed(
                        f"the embedded corral server for {self._root} stopped before it started; see the log above"
                    )
                )
            if not server.started:  # the app's lifespan, which closes the sandboxes, never ran
                await self.served.aclose()


async def _announce_start(server: uvicorn.Server, started: concurrent.futures.Future[None]) -> None:
    while not server.started:
        await asyncio.sleep(0.01)
    started.set_result(None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
