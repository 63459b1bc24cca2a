from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import BUNDLES, FIXTURES, serving


@pytest.fixture(scope="module")
def gridsim_server() -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "gridsim")


@pytest.fixture(scope="module")
def toybox_server() -> Iterator[EmbeddedServer]:
    yield from serving(FIXTURES / "toybox", max_concurrent_envs=3)
