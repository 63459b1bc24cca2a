"""A copy of a live episode at its current turn, made by replay or by a copy of its files.

By replay (`fork = "replay"` in env.toml):
Such an env keeps its state in its process's memory, a function of its task and the calls made.
A copy is then a fresh sandbox whose env is reset with the episode's task and given the episode's
recorded calls again, in order (tool calls and end_turn replies alike), each answer checked
against the recorded one: an env that answers otherwise is not what it declared, and the copy is
refused rather than handed out in a state the original never had.

By a copy of its files (`fork = "copy"`): such an env keeps its state in its sandbox's writable
folders (a shell task's repository). A copy is a fresh sandbox whose fresh env resumes the task
(Env.resume: no files written, none of the task's costly load), whose folders the provider then
replaces with a copy of the original's as they are now (Sandbox.copy_to); no call is replayed.
"""

from __future__ import annotations

from typing import Any

from corral.errors import CorralError, SandboxError
from corral.protocol.frames import CallToolObservation, ForkRefusal
from corral.sandboxes import Sandbox
from corral.server.episodes.episode import AnsweredCall, ServedEpisode


class ForkFailed(CorralError):
    """A copy could not be made; `code` says why (a ForkRefusal)."""

    def __init__(self, code: ForkRefusal, message: str):
        super().__init__(message)
        self.code = code


def copy_of(episode: ServedEpisode, session_id: str) -> ServedEpisode:
    """A copy of `episode`'s task and limits for `session_id`, not started yet: `replay` plays it
    up to where `episode` is. Untouched until then: neither counted nor recorded."""
    return ServedEpisode(
        episode.runtime,
        episode.task,
        limits=episode.limits,
        session_id=session_id,
        split=episode.split,
        untouched=True,
    )


async def replay(copy: ServedEpisode, original: ServedEpisode, calls: list[AnsweredCall]) -> None:
    """Start `copy` and give it `calls` (`original`'s, as recorded), each answer checked; then
    it is an episode of its own, with the time the original's agent has left. ForkFailed when
    it cannot start or an answer differs; the caller closes it then."""
    opened = await copy.start()
    if opened.done:
        raise ForkFailed(ForkRefusal.FORK_FAILED, f"a copy's env could not start: {opened.reason}")
    for number, (name, arguments, recorded, *_) in enumerate(calls, 1):
        answered = await copy.call_tool(name, arguments)
        if copy.done:  # the original played on (an ended one is not forked): the copy's sandbox or env failed
            raise ForkFailed(
                ForkRefusal.FORK_FAILED,
                f"a copy ended at call {number} of {len(calls)} ({name}) of the replay, where the episode "
                f"played on: {copy.reason}",
            )
        if _answer(answered) != _answer(recorded):
            raise ForkFailed(
                ForkRefusal.REPLAY_MISMATCH,
                f"replaying call {number} of {len(calls)} ({name}) into a fresh env of "
                f"{original.task.env!r} answered {_shown(answered)}, where the episode had "
                f'{_shown(recorded)}: the env declares fork = "replay" but does not answer '
                "the same calls the same way (randomness not seeded by the task, the clock, "
                "state kept outside its process). Fix the env, or remove fork from its env.toml",
            )
    _played_on(copy, original)


async def copied(copy: ServedEpisode, original: ServedEpisode, calls: list[AnsweredCall]) -> None:
    """Start `copy` resumed and copy `original`'s files into its sandbox; then it is an episode of
    its own holding `calls` (`original`'s, as recorded) as its past. ForkFailed when it cannot
    start or the copy cannot be made; the caller closes it then."""
    opened = await copy.start(copied=True)
    if opened.done:
        raise ForkFailed(ForkRefusal.FORK_FAILED, f"a copy's env could not start: {opened.reason}")
    try:
        await _sandbox(original).copy_to(_sandbox(copy))
    except SandboxError as error:
        raise ForkFailed(ForkRefusal.FORK_FAILED, f"the episode's files could not be copied: {error}") from None
    copy.calls = list(calls)
    copy.tool_calls = original.tool_calls
    _played_on(copy, original)


def _played_on(copy: ServedEpisode, original: ServedEpisode) -> None:
    """`copy` is now an episode of its own, at `original`'s step, turn and agent's clock."""
    copy.untouched = False
    copy.turn = original.turn
    copy.step_count = original.step_count
    copy._acting_since = original._acting_since  # the copy's agent has the time the original's has left
    copy.runtime.metrics.episodes_started.inc()


def _sandbox(episode: ServedEpisode) -> Sandbox:
    assert episode._env is not None  # started
    return episode._env.sandbox


def _answer(observed: CallToolObservation) -> dict[str, Any]:
    """What a call answered, as the agent sees it (the metadata carries no answer)."""
    return observed.model_dump(exclude={"metadata"})


def _shown(observed: CallToolObservation, most: int = 300) -> str:
    text = repr(observed.answer)
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"
