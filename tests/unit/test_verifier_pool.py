"""The Python verifiers' worker pool: a verifier that hangs costs its own episode only, and a
burst of quick verifications waits in line instead of starting an interpreter each (512
episodes ending at once once started hundreds of workers, 60 MB each, and ran a host out of
memory)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from corral.server.bundles.verifier_pool import STUCK_AFTER_S, VerifierPool

VERIFIER = textwrap.dedent("""
    import time

    def verify(task, report):
        time.sleep(report["sleep_s"])
        return 1.0
""")


@pytest.fixture
def verifier(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "judge.py").write_text(VERIFIER)
    return {"judge": tmp_path / "judge.py"}


async def score(pool: VerifierPool, sleep_s: float, timeout_s: float = 30) -> dict[str, float]:
    return await pool.score({"id": "t"}, {"sleep_s": sleep_s}, {"judge": "judge"}, timeout_s=timeout_s)


async def most_workers_during(pool: VerifierPool, calls: list) -> tuple[list, int]:
    """The calls' results, and the most worker processes alive at once while they ran."""
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, len(pool._workers))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        watcher.cancel()
    return results, most


@pytest.mark.slow  # a real process pool, its workers spawned
def test_a_burst_of_quick_verifications_waits_for_the_pool_s_workers(verifier):
    async def run() -> tuple[list, int]:
        pool = VerifierPool(verifier, size=2)
        pool.start()
        try:
            # 80 at once, 30 ms each on 2 workers: the last waits over a second in line.
            return await most_workers_during(pool, [score(pool, 0.03) for _ in range(80)])
        finally:
            await pool.aclose()

    results, most = asyncio.run(run())
    assert results == [{"judge": 1.0}] * 80
    assert most == 2


@pytest.mark.slow  # a real process pool, its workers spawned
def test_a_hung_verifier_holds_its_own_worker_and_the_next_episode_is_scored(verifier):
    async def run() -> tuple[list, int]:
        pool = VerifierPool(verifier, size=1)
        pool.start()
        hung = [asyncio.create_task(score(pool, 60, timeout_s=20)) for _ in range(3)]

        async def quick_ones_while_the_hung_hold_their_workers() -> list:
            await asyncio.sleep(0.5)
            scored = await asyncio.gather(*(score(pool, 0) for _ in range(4)))
            return [*scored, [task.done() for task in hung]]

        try:
            return await most_workers_during(pool, [quick_ones_while_the_hung_hold_their_workers()])
        finally:
            for task in hung:
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
            await pool.aclose()

    [results], most = asyncio.run(run())
    assert results == [{"judge": 1.0}] * 4 + [[False] * 3]  # scored while the hung still ran
    assert most <= 3 + 1  # a worker per hung verification, and one for those in line


def test_a_pool_made_ready_has_imported_the_verifiers_in_every_worker_before_it_returns(verifier):
    async def run() -> tuple[int, int, dict[str, float]]:
        pool = VerifierPool(verifier, 2)
        try:
            before = pool.booted
            await pool.ready()
            return before, pool.booted, await score(pool, 0, timeout_s=STUCK_AFTER_S / 2)  # no boot left to wait for
        finally:
            await pool.aclose()

    assert asyncio.run(run()) == (0, 2, {"judge": 1.0})
