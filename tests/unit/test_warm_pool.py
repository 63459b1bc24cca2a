"""A warm pool's own rules, on fake sandboxes: starts overlap, the pool grows while resets come
faster than sandboxes start (and no further than its cap), and a reset that finds it empty is
counted, up to /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

from corral.env import jsonrpc
from corral.sandboxes import ProviderStatus, SandboxSpec
from corral.sandboxes.shared import warm_pool as warm_pool_module
from corral.sandboxes.shared.warm_pool import GROWTH, PARALLEL_STARTS, WarmPool, WarmPools
from corral.server.metrics import Metrics

SPEC = SandboxSpec("toy", Path("/nowhere"), ("true",))


class FakeSandbox:
    """Answers the pool's ping; `alive` until closed."""

    def __init__(self) -> None:
        self.alive = True
        self._replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def send_line(self, line: bytes) -> None:
        await self._replies.put(jsonrpc.encode(jsonrpc.result(jsonrpc.decode(line)["id"], {})))

    async def read_line(self) -> bytes:
        return await self._replies.get()

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return ""

    async def close(self) -> None:
        self.alive = False


class Starts:
    """A `create` whose starts wait for `release`, counting how many are in flight at once."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.in_flight = self.most_in_flight = self.started = 0
        self.release = asyncio.Event()

    async def __call__(self) -> FakeSandbox:
        self.started += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.release.wait()
        await asyncio.sleep(self.seconds)
        self.in_flight -= 1
        return FakeSandbox()


async def until(condition, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_pool_starts_its_sandboxes_side_by_side_not_one_after_another():
    async def check() -> None:
        starts = Starts()
        pool = WarmPool("toy", 3, starts)
        await until(lambda: starts.in_flight == 3)
        starts.release.set()
        await until(lambda: pool.ready == 3)
        assert starts.most_in_flight == 3 and starts.started == 3
        await pool.close()

    asyncio.run(check())


def test_starts_in_flight_stay_within_the_parallel_limit():
    async def check() -> None:
        starts = Starts()
        pool = WarmPool("toy", PARALLEL_STARTS + 3, starts)
        await until(lambda: starts.in_flight == PARALLEL_STARTS)
        await asyncio.sleep(0.2)  # the rest wait for a start to end
        assert starts.started == PARALLEL_STARTS
        starts.release.set()
        await until(lambda: pool.ready == PARALLEL_STARTS + 3)
        assert starts.most_in_flight == PARALLEL_STARTS
        await pool.close()

    asyncio.run(check())


def test_a_pool_grows_while_resets_outpace_starts_and_no_further_than_its_cap():
    async def check() -> None:
        starts = Starts(seconds=0.3)
        starts.release.set()
        pool = WarmPool("toy", 2, starts)
        await until(lambda: pool.ready == 2)
        assert pool.target == 2  # no resets yet: the configured size
        for _ in range(1000):  # a burst: 1,000 resets at once
            pool.take()
        assert pool.dry == 998  # two found a warm sandbox, the rest started cold
        assert pool.target == GROWTH * 2  # 1,000 / 30 s * 0.3 s (a start) is 10: capped
        await until(lambda: pool.ready == GROWTH * 2)
        await pool.close()
        assert starts.in_flight == 0

    asyncio.run(check())


def test_a_pool_without_resets_keeps_its_size():
    async def check() -> None:
        starts = Starts(seconds=0.05)
        starts.release.set()
        pool = WarmPool("toy", 2, starts)
        await until(lambda: pool.ready == 2)
        assert pool.take() is not None  # one reset: expected during a start, far below one
        await until(lambda: pool.ready == 2)
        await asyncio.sleep(0.3)
        assert pool.ready == 2 and pool.dry == 0 and starts.started == 3
        await pool.close()

    asyncio.run(check())


def test_metrics_count_the_resets_that_found_the_pool_dry(monkeypatch):
    async def check() -> None:
        monkeypatch.setattr(warm_pool_module, "GROWTH", 1)
        starts = Starts()
        pools: WarmPools[FakeSandbox] = WarmPools(1, lambda spec: starts())
        pools.start([SPEC])
        for _ in range(3):
            pools.take(SPEC)  # nothing started yet: dry each time
        status = ProviderStatus("fake", True, live=0, warm=pools.ready(), warm_dry=pools.dry())
        text = Metrics(lambda: status).render().decode()
        starts.release.set()
        await pools.close()
        return text

    text = asyncio.run(check())
    assert 'corral_warm_pool_dry_total{env="toy"} 3.0' in text
