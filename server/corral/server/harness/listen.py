"""The capture proxy served on one sandbox's Unix socket: the only way out of that sandbox.

A harness episode's sandbox is given a folder of its own (`Sandbox.model_socket`); the server
listens on a socket there for as long as the agent runs, with uvicorn on the proxy's app, and
the relay inside the sandbox joins the agent's loopback connections to it (corral.env.relay).
The socket is everyone's to connect to (the agent may run as a user of its own): the folder
is seen by that sandbox alone, and every call still needs its episode's key.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from corral.errors import SandboxError

START_TIMEOUT_S = 10.0
BACKLOG = 64  # the relay's own bound on connections at once


class _Embedded(uvicorn.Server):
    """A uvicorn server inside corral's: the signals stay the corral server's to handle."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(app: Starlette, path: Path) -> AsyncIterator[None]:
    """`app` answers on the Unix socket `path` within the block; the socket is gone after it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o666)
        listener.listen(BACKLOG)
    except OSError as error:
        listener.close()
        raise SandboxError(f"could not listen for the agent's model calls on {path}: {error}") from None
    # log_config=None: uvicorn would otherwise reconfigure the server's loggers
    config = uvicorn.Config(app, log_config=None, log_level="warning", timeout_graceful_shutdown=1, lifespan="on")
    server = _Embedded(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while not server.started:
                if serving.done():
                    serving.result()
                    raise SandboxError(f"the capture proxy on {path} stopped as it started")
                await asyncio.sleep(0.005)
        yield
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await serving
        listener.close()
        path.unlink(missing_ok=True)
