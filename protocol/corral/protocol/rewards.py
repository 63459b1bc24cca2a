"""From an episode's scores to one reward: by score id, or by a function of all scores."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from corral.errors import RewardError

RewardRule = str | Callable[[dict[str, float]], float] | None


def pick_reward(scores: Mapping[str, float], rule: RewardRule) -> float:
    """The reward of an episode that recorded `scores`.

    `rule=None` takes the only score; a string picks that score; a function combines them,
    into a finite number: finite scores can still combine into inf or nan (1e308 + 1e308), which
    a trainer would learn from as it would from a number.
    """
    if callable(rule):
        reward = float(rule(dict(scores)))
        if not math.isfinite(reward):
            raise RewardError(
                f"the reward function made {reward} of the scores {dict(scores)}; it must be a finite number"
            )
        return reward
    if rule is None:
        if len(scores) != 1:
            raise RewardError(missing_rule_message(sorted(scores)))
        return float(next(iter(scores.values())))
    if rule not in scores:
        raise RewardError(f"reward={rule!r} names no score of this episode; it has: {', '.join(sorted(scores))}")
    return float(scores[rule])


def missing_rule_message(score_ids: list[str]) -> str:
    """Why a task recording several scores has no reward, and the two ways to choose one."""
    return (
        f"the task records {len(score_ids)} scores ({', '.join(score_ids)}) and no reward was chosen: "
        f"pick one with reward={score_ids[0]!r} (corral serve --reward {score_ids[0]}), or combine "
        "them with a function of the scores, e.g. reward=lambda s: sum(s.values()) / len(s)"
    )
