"""Scoring what the agent left, once its episode is over: the command verifiers, each in a fresh
sandbox of what is in the episode's (within its own timeout), then the Python verifiers on the
env's report, outside any sandbox. The episode then applies the reward rule to the scores.

What keeps an episode from being scored is `Unscorable`, with the ending's cause; who caused it
is for the episode to judge (`canary.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral.errors import SandboxError, VerifierError
from corral.protocol.outcomes import Cause
from corral.sandboxes import Sandbox
from corral.server.bundles.format import Task
from corral.server.bundles.verifiers import CommandScore
from corral.server.episodes.runtime import EpisodeRuntime


@dataclass(frozen=True)
class Scored:
    scores: dict[str, float]
    verifier_output: dict[str, str]  # what each command verifier printed, cut short, by score id


class Unscorable(Exception):
    """Why the episode could not be scored, as its ending: the cause, and the reason the client reads."""

    def __init__(self, cause: Cause, reason: str, error_type: str = "execution_error"):
        super().__init__(reason)
        self.cause, self.reason, self.error_type = cause, reason, error_type


async def command_verdicts(
    runtime: EpisodeRuntime, task: Task, sandbox: Sandbox, *, timeout_s: float
) -> dict[str, CommandScore]:
    """What `task`'s command verifiers made of `sandbox` (each in a fresh sandbox of what it holds),
    within `timeout_s` in all; the episode closes `sandbox` once they are done with it."""
    with _unscorable_on_failure(timeout_s):
        async with asyncio.timeout(timeout_s):
            return await runtime.run_command_verifiers(sandbox, task)


async def scores_of(
    runtime: EpisodeRuntime,
    task: Task,
    report: dict[str, Any] | None,
    verdicts: dict[str, CommandScore],
    *,
    timeout_s: float,
) -> Scored:
    """The scores of `task`'s verifiers: the Python verifiers' on the env's `report`, and the
    command verifiers' `verdicts`. Without a `report` (the env could not give one) the Python
    verifiers cannot run, and an episode that needs them is Unscorable, as are verifiers that fail
    or run past `timeout_s`."""
    python_verifiers = runtime.python_verifiers(task)
    if report is None and python_verifiers:
        raise Unscorable(
            "time_budget",
            "the agent's time ran out while the env was busy, so it could not report what the verifiers grade",
        )
    with _unscorable_on_failure(timeout_s):
        # The deadline is the verifiers' own run: a wait for a worker other episodes hold is not this one's doing.
        scores = await runtime.score(task, report or {}, python_verifiers, timeout_s=timeout_s)
    for score_id, result in verdicts.items():  # a reward file (Harbor's) may name several
        scores.update(result.scores_for(score_id))
    return Scored(scores, {score_id: result.output_tail for score_id, result in verdicts.items()})


@contextlib.contextmanager
def _unscorable_on_failure(timeout_s: float) -> Iterator[None]:
    """Verifiers that ran out of time or failed: the episode cannot be scored, with that cause."""
    try:
        yield
    except TimeoutError:
        raise Unscorable("verify_timeout", f"the verifiers did not finish within {timeout_s:g}s", "timeout") from None
    except (SandboxError, VerifierError) as error:
        raise Unscorable("scoring_failed", f"the episode could not be scored: {error}") from None
