"""A generation step's rollouts, counted the way GRPO sees them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from corral.training.accounting import UNSCORED_CAUSES, StepAccount


@dataclass
class Outcome:
    toolset: str
    reward: float | None
    unscored_reason: str | None = None
    truncated: str | None = None
    status: str | None = None
    tool_calls: int = 1
    tool_errors: int = 0
    cause: str | None = None
    seconds: dict[str, float] = field(default_factory=lambda: {"total": 2.0, "verify": 0.5})


def test_a_step_counts_unscored_rollouts_with_reasons_and_groups_without_signal() -> None:
    outcomes = [
        # group 1: rewards differ, the only group GRPO learns from
        Outcome("gridsim", 1.0),
        Outcome("gridsim", 0.2, truncated="completion_length"),
        # group 2: one scored rollout, nothing to compare it with
        Outcome("gridsim", 0.5),
        Outcome("gridsim", None, "the env died during submit_schedule", tool_errors=1, cause="sandbox_failed"),
        # group 3: equal rewards, zero advantage
        Outcome("tictactoe", 0.0, truncated="tool_calls", tool_calls=16),
        Outcome("tictactoe", 0.0),
        # group 4: nothing scored
        Outcome("tictactoe", None, "the reset didn't finish within 600s", cause="reset_timeout", seconds={}),
        Outcome("tictactoe", None, "the reset didn't finish within 600s", cause="reset_timeout", seconds={}),
        # group 5: one the agent made fail (its tool ran past the deadline) scores 0, and counts apart
        Outcome("tictactoe", 0.0, "place didn't answer within 60s", status="failed"),
        Outcome("tictactoe", 1.0),
    ]

    account = StepAccount.of(outcomes, group_size=2)

    assert (account.rollouts, account.scored, account.unscored, account.failed, account.groups) == (10, 7, 3, 1, 5)
    assert account.failed_reasons == {"place didn't answer within 60s": 1}
    assert account.unscored_reasons == {
        "the reset didn't finish within 600s": 2,
        "the env died during submit_schedule": 1,
    }
    assert (account.groups_under_two_scored, account.groups_zero_variance) == (2, 1)
    assert account.reward_by_toolset == pytest.approx({"gridsim": (1.0 + 0.2 + 0.5) / 3, "tictactoe": 0.25})
    assert account.truncated == {"completion_length": 1, "tool_calls": 1}
    metrics = account.metrics()
    assert metrics["rollouts/unscored"] == 3 and metrics["rollouts/failed"] == 1
    assert metrics["rollouts/truncated/tool_calls"] == 1
    assert metrics["rollouts/reward/tictactoe"] == 0.25
    assert metrics["rollouts/tool_calls_per_rollout"] == pytest.approx(25 / 10)
    # corral's own: episodes, pass@1 of the scored (2 of 7 reached 1.0), seconds, unscored by cause
    assert (metrics["rollouts/episodes"], metrics["rollouts/pass@1"]) == (10, 2 / 7)
    assert (metrics["rollouts/sandbox_seconds"], metrics["rollouts/verify_seconds"]) == (16.0, 4.0)
    assert {name: metrics[name] for name in metrics if name.startswith("rollouts/unscored/")} == {
        f"rollouts/unscored/{cause}": {"reset_timeout": 2, "sandbox_failed": 1}.get(cause, 0)
        for cause in UNSCORED_CAUSES
    }
    assert StepAccount.of(outcomes, group_size=2, success=0.5).metrics()["rollouts/pass@1"] == 3 / 7
    assert "2x the reset didn't finish within 600s" in account.summary()
    assert "failed by the agent: 1x place didn't answer within 60s" in account.summary()


def test_a_cause_no_list_names_is_logged_and_a_step_with_nothing_scored_logs_no_pass_at_1() -> None:
    """An older server names no cause ("unknown"); with nothing scored, pass@1 is NaN, which TRL's
    log leaves out of its average instead of counting a 0."""
    metrics = StepAccount.of([Outcome("gridsim", None, "gone")] * 2, group_size=2).metrics()
    assert metrics["rollouts/unscored/unknown"] == 2 and metrics["rollouts/unscored/reset_timeout"] == 0
    assert math.isnan(metrics["rollouts/pass@1"])
