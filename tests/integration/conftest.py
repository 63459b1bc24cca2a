from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.server.embedded import EmbeddedServer
from corral.server.served import ServeOptions
from tests.conftest import BUNDLES, FIXTURES


def _serve(root: Path, **options) -> Iterator[EmbeddedServer]:
    keepalive = options.pop("keepalive", 20.0)
    server = EmbeddedServer(root, ServeOptions(**options), ws_ping_interval=keepalive, ws_ping_timeout=keepalive)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gridsim_server() -> Iterator[EmbeddedServer]:
    yield from _serve(BUNDLES / "gridsim")


@pytest.fixture(scope="module")
def toybox_server() -> Iterator[EmbeddedServer]:
    yield from _serve(FIXTURES / "toybox", max_concurrent_envs=3)


@pytest.fixture
def serve():
    """Start a server with options for one test: `serve(path, max_concurrent_envs=2, ...)`."""
    running: list[Iterator[EmbeddedServer]] = []

    def start(root: Path, **options) -> EmbeddedServer:
        running.append(_serve(root, **options))
        return next(running[-1])

    yield start
    for server in running:
        next(server, None)  # runs its teardown
