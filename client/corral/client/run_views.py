"""What the viewer lists, each one query over the run index: runs, a run's steps and its tasks x
steps pass rates, a step's groups, and filtered episodes.

pass@1 of a step is the mean over its tasks of the share of scored episodes that passed (reward
at least the index's `success`); unscored episodes count in neither. A task is marked too easy
when every scored episode of it passed over the run, never solved when none did.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from corral.client.run_index import EpisodeFilter, RunIndex
from corral.protocol.records import RunHeader


@dataclass(frozen=True)
class RunRow:
    run: str
    episodes: int
    steps: int
    mean_reward: float | None
    ended_at: float
    header: RunHeader | None = None  # what the run is; None for a run recorded without one


@dataclass(frozen=True)
class StepRow:
    step: int | None
    episodes: int
    scored: int
    mean_reward: float | None
    pass_at_1: float | None
    groups: int
    zero_variance: int  # groups whose scored members all got the same reward (or none was scored)


@dataclass
class Heatmap:
    steps: list[int]
    tasks: list[str]
    rates: dict[tuple[str, int], float] = field(default_factory=dict)
    marks: dict[str, str] = field(default_factory=dict)  # task -> "too easy" / "never solved"
    counts: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (scored, passed)


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    steps: int  # steps at which it was scored
    scored: int
    pass_rate: float  # passed / scored over the run
    first_step: int
    mark: str  # "too easy", "never solved" or ""


@dataclass(frozen=True)
class Member:
    episode_id: str
    group_index: int | None
    reward: float | None
    advantage: float | None
    status: str | None
    flags: str


@dataclass(frozen=True)
class GroupRow:
    group: int | None
    task_id: str
    members: list[Member]

    @property
    def zero_variance(self) -> bool:
        rewards = {m.reward for m in self.members if m.reward is not None}
        return len(rewards) <= 1


@dataclass(frozen=True)
class EpisodeRow:
    episode_id: str
    run: str
    task_id: str
    split: str | None
    step: int | None
    group: int | None
    reward: float | None
    advantage: float | None
    status: str | None
    cause: str | None
    seconds: float | None
    tool_calls: int | None
    flags: str


def runs(index: RunIndex) -> list[RunRow]:
    rows = index.query(
        "SELECT run, COUNT(*), COUNT(DISTINCT step), AVG(reward), MAX(ended_at) FROM played "
        "GROUP BY run ORDER BY MAX(ended_at) DESC"
    )
    return [RunRow(run, count, stepped, mean, ended, index.header(run)) for run, count, stepped, mean, ended in rows]


def eval_rewards(index: RunIndex, run: str) -> dict[int, float]:
    """Mean reward of each eval of one of the training run's checkpoints, by the checkpoint's step:
    evals whose model is a folder in the run's `output_dir` (several at one step: their mean)."""
    header = index.header(run)
    output = header.settings.get("output_dir") if header is not None and header.kind == "training" else None
    if not output:
        return {}
    found: dict[int, list[float]] = defaultdict(list)
    for other, mean in index.query("SELECT run, AVG(reward) FROM played WHERE run != ? GROUP BY run", (run,)):
        evaluated = index.header(other)
        if (
            evaluated is not None
            and evaluated.kind == "eval"
            and evaluated.step is not None
            and mean is not None
            and Path(evaluated.model).resolve().parent == Path(output).resolve()
        ):
            found[evaluated.step].append(mean)
    return {step: sum(means) / len(means) for step, means in sorted(found.items())}


def steps(index: RunIndex, run: str) -> list[StepRow]:
    per_task = index.query(
        "SELECT step, task_id, COUNT(*), SUM(reward IS NOT NULL), SUM(reward), SUM(reward >= ?) FROM played "
        "WHERE run = ? GROUP BY step, task_id ORDER BY step",
        (index.success, run),
    )
    variance = {
        step: (groups, zero)
        for step, groups, zero in index.query(
            "SELECT step, COUNT(*), SUM(low IS high) FROM (SELECT step, grp, MIN(reward) AS low, MAX(reward) AS high "
            "FROM played WHERE run = ? AND grp IS NOT NULL GROUP BY step, grp) GROUP BY step",
            (run,),
        )
    }
    by_step: dict[int | None, list[tuple]] = defaultdict(list)
    for row in per_task:
        by_step[row[0]].append(row)
    result = []
    for step, tasks in by_step.items():
        scored = sum(t[3] for t in tasks)
        rates = [t[5] / t[3] for t in tasks if t[3]]
        groups, zero = variance.get(step, (0, 0))
        result.append(
            StepRow(
                step,
                sum(t[2] for t in tasks),
                scored,
                sum(t[4] or 0.0 for t in tasks) / scored if scored else None,
                sum(rates) / len(rates) if rates else None,
                groups,
                zero,
            )
        )
    return result


def heatmap(index: RunIndex, run: str) -> Heatmap:
    rows = index.query(
        "SELECT task_id, step, SUM(reward IS NOT NULL), SUM(reward >= ?) FROM played "
        "WHERE run = ? AND step IS NOT NULL GROUP BY task_id, step",
        (index.success, run),
    )
    found = Heatmap(sorted({r[1] for r in rows}), sorted({r[0] for r in rows}))
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, step, scored, passed in rows:
        if scored:
            found.rates[task, step] = passed / scored
            found.counts[task, step] = (scored, passed)
            totals[task][0] += scored
            totals[task][1] += passed
    for task, (scored, passed) in totals.items():
        if passed == scored:
            found.marks[task] = "too easy"
        elif passed == 0:
            found.marks[task] = "never solved"
    return found


def tasks(grid: Heatmap) -> list[TaskRow]:
    """A run's scored tasks over all its steps, from its heatmap's counts, the most often scored first
    (ties by name)."""
    at: dict[str, list[int]] = defaultdict(list)
    for task, step in grid.counts:
        at[task].append(step)
    rows = []
    for task, steps in at.items():
        scored = sum(grid.counts[task, step][0] for step in steps)
        passed = sum(grid.counts[task, step][1] for step in steps)
        rows.append(TaskRow(task, len(steps), scored, passed / scored, min(steps), grid.marks.get(task, "")))
    return sorted(rows, key=lambda row: (-row.steps, row.task_id))


def groups(index: RunIndex, run: str, step: int) -> list[GroupRow]:
    rows = index.query(
        "SELECT grp, task_id, episode_id, group_index, reward, advantage, status, flags FROM played "
        "WHERE run = ? AND step = ? ORDER BY grp, group_index",
        (run, step),
    )
    by_group: dict[int | None, list[tuple]] = defaultdict(list)
    for row in rows:
        by_group[row[0]].append(row)
    return [GroupRow(group, members[0][1], [Member(*m[2:]) for m in members]) for group, members in by_group.items()]


def group(index: RunIndex, run: str, step: int, number: int) -> GroupRow | None:
    return next((found for found in groups(index, run, step) if found.group == number), None)


def episodes(index: RunIndex, where: EpisodeFilter, limit: int = 200) -> list[EpisodeRow]:
    clause, values = where.where()
    rows = index.query(
        f"SELECT episode_id, run, task_id, split, step, grp, reward, advantage, status, cause, seconds, "
        f"tool_calls, flags FROM played WHERE {clause} ORDER BY ended_at DESC LIMIT {int(limit)}",
        values,
    )
    return [EpisodeRow(*row) for row in rows]


def count(index: RunIndex, where: EpisodeFilter) -> int:
    clause, values = where.where()
    return index.query(f"SELECT COUNT(*) FROM played WHERE {clause}", values)[0][0]


def neighbours(index: RunIndex, run: str, step: int) -> tuple[int | None, int | None]:
    """The run's steps just before and just after `step` (None at either end)."""
    ((before, after),) = index.query(
        "SELECT (SELECT MAX(step) FROM played WHERE run = ? AND step < ?), "
        "(SELECT MIN(step) FROM played WHERE run = ? AND step > ?)",
        (run, step, run, step),
    )
    return before, after
