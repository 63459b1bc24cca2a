"""The reward function TRL calls for `CorralRollout`'s episodes: each episode's reward, as the
server scored it. Its own module so that `run_context` can recognise it without importing the
rollouts that import `run_context`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def episode_reward(
    completions: list[Any],
    episode_reward: list[float | None],
    log_metric: Callable | None = None,
    rollout_metrics: list[dict[str, float]] | None = None,
    **_: Any,
) -> list[float | None]:
    """The reward function of `CorralRollout`: each episode's reward from the server (None: it
    ended unscored, and TRL leaves it out of its group). It also logs the step's rollout
    accounting through TRL's `log_metric`, which averages over processes: every process logs
    the same totals, counted over the rollouts of all of them."""
    if log_metric is not None and rollout_metrics:
        for name, value in rollout_metrics[0].items():
            log_metric(name, value)
    return list(episode_reward)
