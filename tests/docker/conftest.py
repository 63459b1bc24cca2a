"""Fixtures for the docker sandbox tests: servers with sandbox="docker", and container lookups.

Servers are session-scoped: each builds its bundle's images once (the engine's layer cache
shares the python3 layer between bundles) and starts every env once to list its tools.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from websockets.sync.client import connect

from corral.client.urls import ws_url
from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.served import default_instance
from tests.conftest import BUNDLES, FIXTURES, serving
from tests.wire import opened

DOCKERBOX = FIXTURES / "dockerbox"


def instance_of(server: EmbeddedServer) -> str:
    """The reaper's name for an embedded server (its host name and port)."""
    return default_instance(int(server.url.rsplit(":", 1)[1]))


def containers(client, **labels: str) -> list[dict]:
    """Containers (running or not) carrying every label given, e.g. corral_instance="..."."""
    wanted = [f"{key.replace('_', '.')}={value}" for key, value in labels.items()]
    return client.api.containers(all=True, filters={"label": wanted})


def name_of(container: dict) -> str:
    return container["Names"][0].lstrip("/")


def poll(condition: Callable[[], object], timeout_s: float = 30.0, what: str = "the condition") -> object:
    """Wait until `condition()` is truthy; return its value, or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.1)
    return value


def ws(url: str):
    return connect(ws_url(url), proxy=None)


def reset(socket_, split: str = "probe") -> str:
    """Start an episode on a raw socket; its episode id."""
    return opened(socket_, split=split, index=0).episode_id


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def dockerbox_server(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(DOCKERBOX, sandbox="docker", max_concurrent_envs=4)


@pytest.fixture(scope="session")
def gridsim_docker_server(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "gridsim", sandbox="docker")


@pytest.fixture
def serve_docker(docker_engine, serve):
    """Start a docker server for one test: `serve_docker(path, warm_pool=2)`; stopped after it."""
    return functools.partial(serve, sandbox="docker")
