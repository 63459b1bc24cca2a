"""How an episode can end, and what each ending scores: decided here, in one place.

An ending the agent caused is **scored**: the task's failure score (0 unless the task or the
bundle's [defaults] set `failure_score`), status `failed`. A reward of null would tell the
trainer to leave the episode out, and a policy about to score 0 would learn to end that way
instead. Only the platform's own failures are **unscored** (null, status `unscored`): a
trainer must not learn from what it did not cause.

Who caused an ending is decided by evidence, not by the kind of error it raised:
- `agent`: what the agent asked for went wrong (a tool past its deadline, an env it made die).
  The same ending is the platform's only when the sandbox's provider no longer answers (an
  engine that stopped).
- `platform`: the episode ended before the agent could act (its sandbox could not start, its
  reset failed), or the client left.
- `evidence`: a failure after the agent has acted, that either side could have caused (the
  env's own hook raised, a verifier raised or ran out of time, the reward rule failed on the
  scores, corral could not read what came out of the sandbox). It is the agent's unless an
  untouched episode of the same task, played in a fresh sandbox, fails too (`canary.py`): the
  agent controls everything its sandbox holds, so only a platform that shows itself broken
  leaves such an episode unscored.

Where it is recorded: the status, the cause and the seconds by phase travel on the
observation that ends the episode (`ending_observation`), the status on `state` too
(corral.protocol.outcomes names statuses and causes); the cause and the
reason go on the server's `EpisodeRecord` and its `corral.episodes` log line. Errors a caller
catches are corral.errors'; an env connection's failures (corral.server.connection) reach the
episode as those errors, and the episode asks this module what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from corral.protocol.frames import CallToolObservation, ResetObservation
from corral.protocol.outcomes import Cause

Blame = Literal["agent", "platform", "evidence"]
Ended = TypeVar("Ended", ResetObservation, CallToolObservation)


@dataclass(frozen=True)
class Ending:
    cause: Cause
    blame: Blame
    what: str  # for the docs and the log: what ended the episode


ENDINGS: dict[Cause, Ending] = {
    ending.cause: ending
    for ending in (
        Ending("tool_timeout", "agent", "a tool call ran past its deadline"),
        Ending(
            "env_died", "agent", "the env died during a tool call or the agent's turn (it exited, or a limit ended it)"
        ),
        Ending("turn_timeout", "agent", "the env did not answer the agent's reply (end_turn) within the deadline"),
        Ending(
            "time_budget", "agent", "the agent's time budget ran out and the verifiers could not score what it left"
        ),
        Ending(
            "reset_timeout", "platform", "deploying the env and loading the task took longer than the reset deadline"
        ),
        Ending(
            "env_start_failed",
            "platform",
            "the sandbox or the env could not start the task (its image, the engine, its reset)",
        ),
        Ending("sandbox_failed", "platform", "the sandbox's provider stopped answering (e.g. the Docker engine)"),
        Ending("env_hook_failed", "evidence", "the env's own end_turn or report code raised"),
        Ending("verify_timeout", "evidence", "the verifiers did not finish within the deadline"),
        Ending("scoring_failed", "evidence", "a verifier raised, or the verification's sandbox failed"),
        Ending("reward_failed", "evidence", "the reward rule could not be applied to the scores"),
        Ending("unreadable", "evidence", "corral could not make sense of what came out of the sandbox"),
        Ending(
            "abandoned",
            "platform",
            "the client left before the episode ended (a new reset, its session closed, shutdown)",
        ),
    )
}


def ending_observation(observed: Ended, update: dict[str, Any], cause: Cause, seconds: Mapping[str, float]) -> Ended:
    """The observation that ends an episode: `update` applied, and in its metadata what ended it
    (`cause`) and its seconds by phase, which a trainer counts per step (corral.training.accounting)."""
    rounded = {phase: round(value, 3) for phase, value in seconds.items()}
    metadata = {**observed.metadata, "cause": cause, "seconds": rounded}
    return observed.model_copy(update={**update, "done": True, "metadata": metadata})
