"""An episode's tool calls run under a `CallDeadline`: one timer for all of them, moved only when
it fires. It must cut a call short exactly as `asyncio.timeout` would, whatever deadlines came before."""

from __future__ import annotations

import asyncio
import time

import pytest

from corral.server.episodes.alarms import CallDeadline

SHORT, LONG = 0.05, 30.0


async def call(deadline: CallDeadline, seconds: float, *, takes: float) -> float:
    """How long a call that `takes` seconds ran under a deadline of `seconds` (TimeoutError when cut)."""
    began = time.monotonic()
    async with deadline.within(seconds):
        await asyncio.sleep(takes)
    return time.monotonic() - began


def test_a_call_past_its_deadline_raises_timeout_error_at_its_deadline():
    async def late() -> float:
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            await call(CallDeadline(), SHORT, takes=LONG)
        return time.monotonic() - began

    assert SHORT <= asyncio.run(late()) < 1.0


def test_a_short_deadline_after_a_long_one_is_kept():
    async def calls() -> float:
        deadline = CallDeadline()
        await call(deadline, LONG, takes=0)  # leaves its timer set far ahead
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            await call(deadline, SHORT, takes=LONG)
        return time.monotonic() - began

    assert asyncio.run(calls()) < 1.0


def test_a_long_deadline_after_a_short_one_lets_the_call_finish():
    async def calls() -> float:
        deadline = CallDeadline()
        await call(deadline, SHORT, takes=0)  # its timer fires during the next call, set for this one
        return await call(deadline, 1.0, takes=4 * SHORT)

    assert asyncio.run(calls()) >= 4 * SHORT


def test_a_timer_that_fires_between_calls_cuts_nothing_short():
    async def calls() -> float:
        deadline = CallDeadline()
        await call(deadline, SHORT, takes=0)
        await asyncio.sleep(2 * SHORT)  # the first call's timer fires here
        return await call(deadline, 1.0, takes=SHORT)

    assert asyncio.run(calls()) >= SHORT


def test_a_cancellation_from_outside_goes_through_as_a_cancellation():
    async def cancelled() -> None:
        task = asyncio.create_task(call(CallDeadline(), LONG, takes=LONG))
        await asyncio.sleep(SHORT)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())


def test_cancel_leaves_no_timer_on_the_loop():
    async def ended() -> int:
        deadline = CallDeadline()
        await call(deadline, LONG, takes=0)
        await call(deadline, 1.0, takes=0)  # its timer replaces the first one's
        deadline.cancel()
        loop = asyncio.get_running_loop()
        return sum(not handle.cancelled() for handle in loop._scheduled)  # type: ignore[attr-defined]

    assert asyncio.run(ended()) == 0
