"""How an episode ended, in the words both sides use: its status, and its cause.

The status travels on the observation that ends the episode, on `state` and on both records;
the cause, on the server's record (`EpisodeRecord.cause`). Which causes are the agent's and
which the platform's is the server's decision (corral.server.episodes.endings), not the protocol's.
"""

from __future__ import annotations

from typing import Literal, get_args

# scored: the verifiers' reward; failed: the agent made the episode fail (a tool past its
# deadline, its env killed...), which scores the task's failure score; unscored: the platform
# failed, reward null, and trainers leave the episode out.
EpisodeStatus = Literal["scored", "failed", "unscored"]
STATUSES: tuple[EpisodeStatus, ...] = get_args(EpisodeStatus)

# What ended an episode, in a word: "scored" (its verifiers scored it), or what cut it short
# (each one's meaning is in corral.server.episodes.endings.ENDINGS and docs/bundle-format.md).
Cause = Literal[
    "scored",
    "tool_timeout",
    "env_died",
    "turn_timeout",
    "time_budget",
    "reset_timeout",
    "env_start_failed",
    "sandbox_failed",
    "env_hook_failed",
    "verify_timeout",
    "scoring_failed",
    "reward_failed",
    "unreadable",
    "abandoned",
]
CAUSES: tuple[Cause, ...] = get_args(Cause)
