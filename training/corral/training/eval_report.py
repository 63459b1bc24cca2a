"""What `evaluate` reports: pass@k (the unbiased estimate) and mean reward per task and overall,
and why episodes failed or went unscored, as a table or as plain data."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.training.rollout_player import Rollout


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from `n` samples of which `c` passed (Chen et al. 2021):
    the chance that k of the n, drawn without replacement, include one that passed."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples; got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class TaskScore:
    """One task's samples: `rewards` of those scored (failed ones at their failure score)."""

    task_id: str
    rewards: list[float] = field(default_factory=list)
    passed: int = 0
    failed: int = 0  # by the agent: scored their failure score, counted as misses
    unscored: int = 0  # by the platform: left out

    @property
    def mean_reward(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(len(self.rewards), self.passed, k) if len(self.rewards) >= k else None


@dataclass
class EvalReport:
    """What `evaluate` measured. A task's pass@k counts when it has at least k scored samples."""

    model: str
    bundle: str
    split: str
    k: int
    success: float
    tasks: list[TaskScore]
    episodes: int
    seconds: float
    failed_reasons: Counter[str] = field(default_factory=Counter)
    unscored_reasons: Counter[str] = field(default_factory=Counter)
    run: str | None = None  # the run its rollouts were recorded under, if they were
    served_run: str | None = None  # the run an in-process server recorded their episodes under
    context_length: int | None = None  # a local model's positions: no episode reaches past them
    context_cut: int = 0  # episodes cut there, short of their completion limit

    @property
    def ks(self) -> list[int]:
        """The k reported: 1, powers of two below k, and k."""
        return sorted({1, self.k, *(2**i for i in range(1, 8) if 2**i < self.k)})

    @property
    def mean_reward(self) -> float | None:
        rewards = [r for task in self.tasks for r in task.rewards]
        return statistics.fmean(rewards) if rewards else None

    @property
    def pass_at(self) -> dict[int, float | None]:
        """pass@k over the tasks, for each reported k: the mean of the tasks' estimates."""
        found = {}
        for k in self.ks:
            values = [v for task in self.tasks if (v := task.pass_at(k)) is not None]
            found[k] = statistics.fmean(values) if values else None
        return found

    @property
    def scored(self) -> int:
        return sum(len(task.rewards) for task in self.tasks)

    def table(self, *, tasks_shown: int | None = None) -> str:
        """The summary: a row per task (the first `tasks_shown`), overall, and the reasons."""
        head = ["task", "scored", "mean reward", *(f"pass@{k}" for k in self.ks)]
        rows = [
            [
                t.task_id,
                f"{len(t.rewards)}/{len(t.rewards) + t.unscored}",
                _number(t.mean_reward),
                *(_number(t.pass_at(k)) for k in self.ks),
            ]
            for t in self.tasks[:tasks_shown]
        ]
        if tasks_shown is not None and len(self.tasks) > tasks_shown:
            rows.append([f"... {len(self.tasks) - tasks_shown} more tasks", "", "", *("" for _ in self.ks)])
        rows.append(
            [
                "overall",
                f"{self.scored}/{self.episodes}",
                _number(self.mean_reward),
                *(_number(self.pass_at[k]) for k in self.ks),
            ]
        )
        widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
        lines = [
            (
                f"{self.model} on {self.bundle} ({self.split}): {len(self.tasks)} tasks x {self.k} samples = "
                f"{self.episodes} episodes in {self.seconds:.1f}s; passed: reward >= {self.success:g}"
            )
        ]
        lines += [
            "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [head, *rows]
        ]
        for title, reasons in (
            ("failed by the agent (scored their failure score)", self.failed_reasons),
            ("unscored (left out of the numbers)", self.unscored_reasons),
        ):
            if reasons:
                lines.append(f"{title}: {sum(reasons.values())}")
                lines += [f"  {count}x {reason}" for reason, count in reasons.most_common()]
        if self.context_cut:
            lines.append(
                f"note: {self.context_cut} episode(s) reached the model's context of {self.context_length} "
                "positions (prompt and completion together) and were cut there, short of the completion limit"
            )
        if self.run is not None:  # the names `corral episodes DIR --runs` lists: the tokens', the server's
            served = f"; their episodes as the server's run {self.served_run}" if self.served_run else ""
            lines.append(f"rollouts recorded as run {self.run}{served}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The numbers as plain data (for JSON)."""
        return {
            "model": self.model,
            "bundle": self.bundle,
            "split": self.split,
            "k": self.k,
            "success": self.success,
            "episodes": self.episodes,
            "scored": self.scored,
            "seconds": round(self.seconds, 3),
            "mean_reward": self.mean_reward,
            "pass_at": {str(k): v for k, v in self.pass_at.items()},
            "tasks": [
                {
                    "task_id": t.task_id,
                    "rewards": t.rewards,
                    "passed": t.passed,
                    "failed": t.failed,
                    "unscored": t.unscored,
                    "mean_reward": t.mean_reward,
                    "pass_at": {str(k): t.pass_at(k) for k in self.ks},
                }
                for t in self.tasks
            ],
            "failed_reasons": dict(self.failed_reasons),
            "unscored_reasons": dict(self.unscored_reasons),
            "run": self.run,
            "served_run": self.served_run,
            "context_length": self.context_length,
            "context_cut": self.context_cut,
        }


def report_of(
    played: Sequence[Rollout],
    task_ids: list[str],
    *,
    name: str,
    bundle: str,
    split: str,
    k: int,
    success: float,
    seconds: float,
    run: str | None,
) -> EvalReport:
    """The report of the rollouts `played` over `task_ids`: failed ones count as misses at their
    failure score, unscored ones are left out and their reasons listed."""
    tasks = {task_id: TaskScore(task_id) for task_id in task_ids}
    report = EvalReport(name, bundle, split, k, success, list(tasks.values()), len(played), seconds, run=run)
    for rollout in played:
        task = tasks[rollout.task_id]
        if rollout.reward is None:
            task.unscored += 1
            report.unscored_reasons[rollout.unscored_reason or "no reason given"] += 1
            continue
        task.rewards.append(rollout.reward)
        task.passed += rollout.reward >= success
        if rollout.status == "failed":
            task.failed += 1
            report.failed_reasons[rollout.unscored_reason or "no reason given"] += 1
    return report


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
