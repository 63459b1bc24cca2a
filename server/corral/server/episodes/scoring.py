"""Scoring what the agent left, once its episode is over: the command verifiers, each in a fresh
sandbox of what is in the episode's (within its own timeout), then the Python verifiers on the
env's report, outside any sandbox. The episode then applies the reward rule to the scores.

What keeps an episode from being scored is `Unscorable`, with the ending's cause; who caused it
is for the episode to judge (`canary.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from corral.errors import SandboxError, VerifierError
from corral.protocol.outcomes import Cause
from corral.sandboxes import Sandbox
from corral.server.bundles.format import Task
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


async def score_what_was_left(
    runtime: EpisodeRuntime,
    task: Task,
    sandbox: Sandbox,
    report: dict[str, Any] | None,
    *,
    timeout_s: float,
    release: Callable[[], Awaitable[None]],
) -> Scored:
    """The scores of `task`'s verifiers. `release` closes `sandbox` once the command verifiers are
    done with it. Without a `report` (the env could not give one) the Python verifiers cannot run,
    and an episode that needs them is Unscorable, as are verifiers that fail or run past `timeout_s`."""
    python_verifiers = runtime.python_verifiers(task)
    try:
        async with asyncio.timeout(timeout_s):
            checked = await runtime.run_command_verifiers(sandbox, task)
        await release()  # its own deadline: a close that hangs takes no verdict
        if report is None and python_verifiers:
            raise Unscorable(
                "time_budget",
                "the agent's time ran out while the env was busy, so it could not report what the verifiers grade",
            )
        # The deadline is the verifiers' own run: a wait for a worker other episodes hold is not this one's doing.
        scores = await runtime.score(task, report or {}, python_verifiers, timeout_s=timeout_s)
    except TimeoutError:
        raise Unscorable("verify_timeout", f"the verifiers did not finish within {timeout_s:g}s", "timeout") from None
    except (SandboxError, VerifierError) as error:
        raise Unscorable("scoring_failed", f"the episode could not be scored: {error}") from None
    for score_id, result in checked.items():  # a reward file (Harbor's) may name several
        scores.update(result.scores_for(score_id))
    return Scored(scores, {score_id: result.output_tail for score_id, result in checked.items()})
