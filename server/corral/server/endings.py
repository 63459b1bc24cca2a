"""How an episode can end, and what each ending scores: decided here, in one place.

An ending the agent caused is **scored**: the task's failure score (0 unless the task or the
bundle's [defaults] set `failure_score`), status `failed`. A reward of null would tell the
trainer to leave the episode out, and a policy about to score 0 would learn to end that way
instead. Only the platform's own failures are **unscored** (null, status `unscored`): a
trainer must not learn from what it did not cause.

Where the cause cannot be told apart, the code leans:
- a tool call past its deadline is the agent's: what a tool does is what the agent asked
  (an env too slow for its own deadline is its bundle's bug, seen as failed episodes), unless
  the sandbox's provider no longer answers (an engine that stopped), which is the platform's;
- an env that dies during a tool call or while handling the agent's reply (it exited, or
  its memory, process or disk limit ended it) is the agent's, with the same exception;
- an env's hook that raises (its reset, end_turn or report code) and a verifier that raises or
  hangs on its own are the platform's: the bundle's code failed, and its author must see it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["scored", "failed", "unscored"]


@dataclass(frozen=True)
class Ending:
    cause: str
    by_agent: bool
    what: str  # for the docs and the log: what ended the episode

    @property
    def status(self) -> Status:
        return "failed" if self.by_agent else "unscored"


ENDINGS = {ending.cause: ending for ending in (
    Ending("tool_timeout", True, "a tool call ran past its deadline"),
    Ending("env_died", True, "the env died during a tool call or the agent's turn (it exited, or a limit ended it)"),
    Ending("turn_timeout", True, "the env did not answer the agent's reply (end_turn) within the deadline"),
    Ending("time_budget", True, "the agent's time budget ran out and the verifiers could not score what it left"),
    Ending("reset_timeout", False, "deploying the env and loading the task took longer than the reset deadline"),
    Ending("env_start_failed", False, "the sandbox or the env could not start the task (its image, the engine, its reset)"),
    Ending("sandbox_failed", False, "the sandbox's provider stopped answering (e.g. the Docker engine)"),
    Ending("env_hook_failed", False, "the env's own end_turn or report code raised"),
    Ending("verify_timeout", False, "the verifiers did not finish within the deadline"),
    Ending("scoring_failed", False, "a verifier raised, or the verification's sandbox failed"),
    Ending("reward_failed", False, "the reward rule could not be applied to the scores"),
    Ending("abandoned", False, "the client left before the episode ended (a new reset, its session closed, shutdown)"),
)}
