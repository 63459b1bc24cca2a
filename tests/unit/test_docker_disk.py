"""The disk watch's own cost (docker/whole_image/disk.py): each ask makes the engine walk the container's
layer, which an agent makes long with many small files; the watch spaces its asks by what the
last one took, so it holds the engine a bounded share of the time, and it still stops a
container whose paths, each counted at a block, pass the limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral.sandboxes.docker.whole_image.disk import PATH_BYTES, SPACING, watch_disk

FILES = 200_000  # empty files: SizeRw 0, one changed path each
WALK_S = 5.0  # what the engine takes to walk such a layer, per ask


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0  # the engine's time spent on the watch's asks


class FakeEngine:
    """An engine whose every size ask walks `FILES` paths in WALK_S of `clock`'s time, for
    `asks` asks; then the container is gone."""

    def __init__(self, clock: Clock, asks: int):
        self.clock, self.asks, self.killed = clock, asks, False
        self.api = self

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    def containers(self, **_: Any) -> list[dict]:
        if self.asks == 0:
            return []
        self.asks -= 1
        self.clock.now += WALK_S
        self.clock.busy += WALK_S
        return [{"SizeRw": 0}]

    def diff(self, _container: str) -> list[dict]:
        return [{"Path": f"/f{i}", "Kind": 1} for i in range(FILES)]

    def kill(self, _container: str) -> None:
        self.killed = True


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watched(engine: FakeEngine, limit_mb: int, said: list[str]) -> None:
    """watch_disk on the fake clock: its sleeps advance it (the process's own clock and sleep are
    never patched: a server other tests left running in this process runs on them)."""
    clock = engine.clock

    async def sleep(seconds: float) -> None:
        clock.now += seconds

    asyncio.run(watch_disk(engine, "c", limit_mb, said.append, clock=lambda: clock.now, sleep=sleep))  # type: ignore[arg-type]


def test_a_layer_of_many_small_files_holds_the_engine_a_bounded_share_of_the_watch_s_time(clock):
    engine = FakeEngine(clock, asks=20)
    said: list[str] = []

    watched(engine, (FILES * PATH_BYTES >> 20) + 1, said)

    assert not said and not engine.killed  # under the limit: watched, not stopped
    assert clock.busy / clock.now <= 1 / (SPACING + 1) + 0.01, f"the engine spent {clock.busy / clock.now:.0%}"


def test_many_empty_files_past_the_limit_stop_the_container(clock):
    engine = FakeEngine(clock, asks=20)
    said: list[str] = []
    limit_mb = (FILES * PATH_BYTES >> 20) // 2

    watched(engine, limit_mb, said)

    assert engine.killed and engine.asks == 19
    assert f"{FILES} paths changed" in said[0] and f"more than its limit of {limit_mb} MB" in said[0], said
