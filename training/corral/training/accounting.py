"""What each generation step's rollouts came to, for the trainer's logger.

GRPO learns only from groups whose rewards differ; a rollout the server could not score is left
out of its group. So a step's log says how many rollouts were scored, how many the agent made
fail (scored its failure score: a policy drifting towards failures shows here) and why, how many
the platform left unscored and why,
how many groups were left with one scored rollout or none (nothing to compare) or with equal
rewards (zero advantage), the reward per environment class, and how many rollouts hit a limit;
and corral's own figures: episodes played, pass@1 (the share of scored episodes that passed),
the unscored by cause, and the seconds their sandboxes were held and their verifiers ran.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from corral.client.episode import SERVER_LOST
from corral.protocol.outcomes import CAUSES, EpisodeStatus

# Every cause an unscored episode may have, logged each step (0 when none): TRL averages a metric
# over the steps it was logged in, so a cause logged only when seen would read as every step's.
UNSCORED_CAUSES = (*(cause for cause in CAUSES if cause != "scored"), SERVER_LOST)


class RolloutOutcome(Protocol):
    """What accounting reads from one rollout."""

    toolset: str
    reward: float | None
    status: EpisodeStatus | None
    unscored_reason: str | None
    cause: str | None
    seconds: dict[str, float]
    truncated: str | None
    tool_calls: int
    tool_errors: int


@dataclass(frozen=True)
class Outcome:
    """What accounting reads from one rollout, and no more: small enough to gather from every process."""

    toolset: str
    reward: float | None
    status: EpisodeStatus | None
    unscored_reason: str | None
    cause: str | None
    seconds: dict[str, float]
    truncated: str | None
    tool_calls: int
    tool_errors: int

    @classmethod
    def of(cls, rollout: RolloutOutcome) -> Outcome:
        return cls(
            rollout.toolset,
            rollout.reward,
            rollout.status,
            rollout.unscored_reason,
            rollout.cause,
            rollout.seconds,
            rollout.truncated,
            rollout.tool_calls,
            rollout.tool_errors,
        )


@dataclass
class StepAccount:
    """One generation step's rollouts, counted.

    Attributes:
        rollouts: Rollouts played (episodes).
        passed: Scored rollouts whose reward reached `success` (pass@1 is passed / scored).
        scored: Rollouts with a reward: the verifiers', or the failure score of those that failed.
        failed_reasons: Why rollouts failed by the agent's doing (scored their failure score), with counts.
        unscored_reasons: Why the others were left unscored (the platform's failures), with counts.
        unscored_causes: The same, by the server's cause in a word (`outcomes.CAUSES`).
        sandbox_seconds: Seconds the rollouts' sandboxes were held, reset to end, all added up.
        verify_seconds: Seconds their verifiers ran, all added up.
        groups: Groups of `num_generations` rollouts of one prompt.
        groups_under_two_scored: Groups with fewer than two scored rollouts: no comparison, no signal.
        groups_zero_variance: Groups whose scored rollouts (two or more) all got the same reward.
        reward_by_toolset: Mean reward of the scored rollouts, per environment class (toolset).
        truncated: Rollouts stopped by a limit, per limit: `completion_length` or `tool_calls`.
        tool_calls: Tool calls made (end_turn included).
        tool_errors: Tool calls that failed (unreadable, unknown tool, bad arguments, an error).
    """

    rollouts: int = 0
    passed: int = 0
    scored: int = 0
    failed_reasons: Counter[str] = field(default_factory=Counter)
    unscored_reasons: Counter[str] = field(default_factory=Counter)
    unscored_causes: Counter[str] = field(default_factory=Counter)
    sandbox_seconds: float = 0.0
    verify_seconds: float = 0.0
    groups: int = 0
    groups_under_two_scored: int = 0
    groups_zero_variance: int = 0
    reward_by_toolset: dict[str, float] = field(default_factory=dict)
    truncated: Counter[str] = field(default_factory=Counter)
    tool_calls: int = 0
    tool_errors: int = 0

    @classmethod
    def of(cls, outcomes: Sequence[RolloutOutcome], group_size: int, success: float = 1.0) -> StepAccount:
        """Count `outcomes`, consecutive runs of `group_size` of them being one prompt's group; a
        scored one passes at a reward of `success` or more."""
        account = cls(rollouts=len(outcomes))
        rewards: dict[str, list[float]] = {}
        for outcome in outcomes:
            account.tool_calls += outcome.tool_calls
            account.tool_errors += outcome.tool_errors
            account.sandbox_seconds += outcome.seconds.get("total", 0.0)
            account.verify_seconds += outcome.seconds.get("verify", 0.0)
            if outcome.truncated:
                account.truncated[outcome.truncated] += 1
            if outcome.reward is None:
                account.unscored_reasons[outcome.unscored_reason or "no reason given"] += 1
                account.unscored_causes[outcome.cause or "unknown"] += 1
            else:
                account.scored += 1
                account.passed += outcome.reward >= success
                if outcome.status == "failed":
                    account.failed_reasons[outcome.unscored_reason or "no reason given"] += 1
                rewards.setdefault(outcome.toolset, []).append(outcome.reward)
        account.reward_by_toolset = {name: statistics.fmean(values) for name, values in rewards.items()}
        for start in range(0, len(outcomes), max(group_size, 1)):
            scored = [o.reward for o in outcomes[start : start + group_size] if o.reward is not None]
            account.groups += 1
            if len(scored) < 2:
                account.groups_under_two_scored += 1
            elif len(set(scored)) == 1:
                account.groups_zero_variance += 1
        return account

    @property
    def unscored(self) -> int:
        return self.rollouts - self.scored

    @property
    def failed(self) -> int:
        return sum(self.failed_reasons.values())

    def metrics(self) -> dict[str, float]:
        """Flat metrics for the trainer's logger (W&B, trackio, ...), under `rollouts/`."""
        metrics = {
            "rollouts/episodes": float(self.rollouts),
            "rollouts/pass@1": self.passed / self.scored if self.scored else math.nan,  # TRL's log skips a NaN
            "rollouts/sandbox_seconds": self.sandbox_seconds,
            "rollouts/verify_seconds": self.verify_seconds,
            "rollouts/scored": float(self.scored),
            "rollouts/failed": float(self.failed),
            "rollouts/unscored": float(self.unscored),
            "rollouts/groups_under_two_scored": float(self.groups_under_two_scored),
            "rollouts/groups_zero_variance": float(self.groups_zero_variance),
            "rollouts/truncated": float(sum(self.truncated.values())),
            "rollouts/tool_calls_per_rollout": self.tool_calls / max(self.rollouts, 1),
            "rollouts/tool_errors_per_rollout": self.tool_errors / max(self.rollouts, 1),
        }
        for cause in {**dict.fromkeys(UNSCORED_CAUSES), **self.unscored_causes}:
            metrics[f"rollouts/unscored/{cause}"] = float(self.unscored_causes[cause])
        for limit, count in self.truncated.items():
            metrics[f"rollouts/truncated/{limit}"] = float(count)
        for toolset, reward in self.reward_by_toolset.items():
            metrics[f"rollouts/reward/{toolset}"] = reward
        return metrics

    def summary(self) -> str:
        """One line for a log: the counts, and the reasons rollouts were left unscored."""
        text = (
            f"{self.scored}/{self.rollouts} rollouts scored; {self.groups_under_two_scored}/{self.groups} groups "
            f"with under two scored, {self.groups_zero_variance} with equal rewards"
        )
        if self.truncated:
            text += "; truncated: " + ", ".join(f"{n} by {limit}" for limit, n in self.truncated.items())
        if self.failed_reasons:
            text += "; failed by the agent: " + "; ".join(
                f"{n}x {reason}" for reason, n in self.failed_reasons.most_common()
            )
        if self.unscored_reasons:
            text += "; unscored: " + "; ".join(f"{n}x {reason}" for reason, n in self.unscored_reasons.most_common())
        return text
