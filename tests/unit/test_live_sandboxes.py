"""A provider's books of its sandboxes (`LiveSandboxes`): a removal that fails in the
background is logged, and closing the provider still waits for every other removal."""

from __future__ import annotations

import asyncio
import logging

import pytest

from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.shared.live_sandboxes import LiveSandboxes


class Stopped:
    """A sandbox already closed: only its removal is left, in the background."""


async def no_warm_start(spec: SandboxSpec) -> Stopped:
    raise AssertionError("a pool of 0 starts nothing")


def test_a_failed_removal_is_logged_once_and_close_still_waits_for_the_others(caplog: pytest.LogCaptureFixture):
    removed: list[str] = []

    async def removal(name: str, fails: bool) -> None:
        await asyncio.sleep(0.05)
        if fails:
            raise RuntimeError(f"the pod {name} could not be deleted")
        removed.append(name)

    async def check() -> None:
        live: LiveSandboxes[Stopped] = LiveSandboxes(0, no_warm_start)
        for name, fails in [("a", True), ("b", False), ("c", False)]:
            sandbox = Stopped()
            live.add(sandbox)
            live.closed(sandbox, removal(name, fails))
        await live.close()  # does not raise the failed removal's error

    with caplog.at_level(logging.WARNING, logger="corral.sandboxes"):
        asyncio.run(check())
    assert sorted(removed) == ["b", "c"]
    assert [record.getMessage() for record in caplog.records] == [
        "a sandbox's removal (or other background call) failed: the pod a could not be deleted"
    ]
