"""A copy by replay (`corral.server.episodes.fork`) on the in-process parrot: what the copy
keeps of the original (its turn, its step count, its agent's clock), what a refused copy leaves
(no record, no count), and a copy whose sandbox cannot start."""

from __future__ import annotations

import asyncio
import time

import pytest

from corral.protocol.frames import ForkRefusal
from corral.server.episodes.episode import ServedEpisode
from corral.server.episodes.fork import ForkFailed, copy_of, replay
from tests.episode_fakes import LIMITS, TASK, FakeRuntime

CALLS = [("say", {"text": "hello"}), ("say", {"text": "again"})]


async def played(runtime: FakeRuntime, task=TASK) -> ServedEpisode:
    original = ServedEpisode(runtime, task, limits=LIMITS, session_id="s1")
    await original.start()
    for name, arguments in CALLS:
        await original.call_tool(name, arguments)
    original.step_count = 3
    return original


def started(runtime: FakeRuntime) -> float | None:
    return runtime.metrics.registry.get_sample_value("corral_episodes_started_total")


def test_a_copy_holds_the_originals_calls_and_is_counted_and_recorded_as_an_episode_of_its_own():
    runtime = FakeRuntime()

    async def fork() -> None:
        original = await played(runtime)
        copy = copy_of(original, "s2")
        await replay(copy, original, list(original.calls))
        assert (copy.step_count, copy.session_id, copy.tool_calls) == (3, "s2", 2)
        assert copy.episode_id != original.episode_id
        assert runtime.connections[1].env.heard == ["hello", "again"]  # the copy's own env, given the calls
        ended = await copy.call_tool("end_turn", {"response": ""})
        assert ended.done and ended.reward == 0.5
        await original.close()

    asyncio.run(fork())
    assert started(runtime) == 2
    scored, abandoned = sorted(runtime.ended, key=lambda record: record.status)
    assert (scored.status, scored.session_id, len(scored.calls)) == ("scored", "s2", 3)
    assert abandoned.session_id == "s1"


def test_a_copy_has_the_time_the_originals_agent_has_left():
    runtime = FakeRuntime()
    timed = TASK.model_copy(update={"time_budget_s": 1.0})

    async def fork() -> str | None:
        original = await played(runtime, timed)
        await asyncio.sleep(0.7)
        copy = copy_of(original, "s2")
        await replay(copy, original, list(original.calls))
        await asyncio.sleep(0.5)  # 1.2 s since the original's reset; 0.5 s since the copy's
        answered = await copy.call_tool("say", {"text": "late"})
        await original.close()
        return answered.reason

    began = time.monotonic()
    reason = asyncio.run(fork())
    assert time.monotonic() - began < 5
    assert reason is not None and "time budget of 1s ran out" in reason


async def refused_replay(original: ServedEpisode, recorded: list) -> ForkFailed:
    """A copy of `original` given `recorded` to replay, which must refuse; both then closed."""
    copy = copy_of(original, "s2")
    with pytest.raises(ForkFailed) as refused:
        await replay(copy, original, recorded)
    await copy.close()
    await original.close()
    return refused.value


def test_a_copy_that_answers_otherwise_is_refused_and_leaves_no_record_nor_count():
    runtime = FakeRuntime()

    async def fork() -> ForkFailed:
        original = await played(runtime)
        recorded = list(original.calls)
        recorded[1] = (recorded[1][0], {"text": "otherwise"}, *recorded[1][2:])  # the env now says another thing
        return await refused_replay(original, recorded)

    refused = asyncio.run(fork())
    assert refused.code == ForkRefusal.REPLAY_MISMATCH and "call 2 of 2 (say)" in str(refused)
    assert started(runtime) == 1 and [record.session_id for record in runtime.ended] == ["s1"]


def test_a_copy_whose_sandbox_cannot_start_is_the_platforms_failure():
    runtime = FakeRuntime()

    async def fork() -> ForkFailed:
        original = await played(runtime)
        runtime.start_fails = "the engine is gone"
        return await refused_replay(original, list(original.calls))

    refused = asyncio.run(fork())
    assert refused.code == ForkRefusal.FORK_FAILED and "the engine is gone" in str(refused)


def test_a_copy_whose_env_dies_during_the_replay_is_the_platforms_failure_not_a_mismatch():
    runtime = FakeRuntime()

    async def fork() -> ForkFailed:
        original = await played(runtime)
        recorded = list(original.calls)
        recorded[1] = ("crash", {}, *recorded[1][2:])  # the copy's env dies where the original's answered
        return await refused_replay(original, recorded)

    refused = asyncio.run(fork())
    assert refused.code == ForkRefusal.FORK_FAILED and "the env died during crash" in str(refused)
    assert [record.session_id for record in runtime.ended] == ["s1"]
