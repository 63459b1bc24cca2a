from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import BUNDLES, FIXTURES, serving
from tests.harness_bundle import Harness, copied_bundle
from tests.harness_engine import StandInEngine
from tests.harness_engine import serving as serving_app


@pytest.fixture(scope="module")
def gridsim_server() -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "gridsim")


@pytest.fixture(scope="module")
def toybox_server() -> Iterator[EmbeddedServer]:
    yield from serving(FIXTURES / "toybox", max_concurrent_envs=3)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """harnessbox served on the local sandbox (its env and agent run by the test's Python, which
    has openai), and the stand-in engine its episodes' resets name."""
    engine = StandInEngine()
    with serving_app(engine.app()) as engine_url:
        port = int(engine_url.rsplit(":", 1)[1])
        bundle = copied_bundle(tmp_path_factory.mktemp("harness"), port, python=sys.executable)
        for server in serving(bundle, max_concurrent_envs=2):
            yield Harness(server, engine, engine_url)
