"""`corral episodes DIR`: the recorded episodes as a table, one as a transcript, exports.

The table and its filters read the records' index only, so a folder of a million episodes
lists as fast as one of ten; a transcript reads the one record it shows.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from corral.client.difficulty_exports import Difficulty, rl_prompts, sft_rows
from corral.client.display import record_doc
from corral.client.record_exports import rl_dataset, sft_dataset, write_jsonl
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.errors import ConfigError
from corral.protocol.outcomes import STATUSES
from corral.protocol.record_store import EpisodeStore
from corral.protocol.records import RescoreRecord

EXPORTS = ("sft", "rl", "prompts")


@dataclass(frozen=True)
class Filters:
    run: str | None = None
    task: str | None = None
    split: str | None = None
    status: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None


@dataclass(frozen=True)
class Request:
    """What `corral episodes` was asked: a listing, one episode, the runs, or an export."""

    folder: Path
    episode: str | None = None
    filters: Filters = Filters()
    limit: int = 50
    runs: bool = False
    rollouts: Path | None = None
    export: str | None = None
    out: Path | None = None
    per_task: int = 1
    seed: int = 0
    difficulty: Difficulty | None = None  # export by each task's pass rate (--min-pass, --target, ...)


def answer(request: Request) -> str:
    """The text `corral episodes` prints; ConfigError (one line, with the fix) for a bad request."""
    if request.export not in (None, *EXPORTS):
        raise ConfigError(f"unknown --export {request.export!r}; choose one of: {', '.join(EXPORTS)}")
    if request.export is not None and request.out is None:
        raise ConfigError("--export writes to a file: add --out FILE")
    if request.filters.status not in (None, *STATUSES):
        raise ConfigError(f"unknown --status {request.filters.status!r}; choose one of: {', '.join(STATUSES)}")
    if request.export == "prompts" or (request.export == "sft" and request.difficulty is not None):
        return export_by_difficulty(request, request.difficulty or Difficulty(seed=request.seed))
    with EpisodeStore(request.folder, rollouts=request.rollouts) as store:
        if request.runs:
            return runs(store)
        if request.episode is not None:
            return transcript(store, request.episode)
        if request.export is not None and request.out is not None:
            return export(
                store, request.export, request.out, request.filters, per_task=request.per_task, seed=request.seed
            )
        return listing(store, request.filters, request.limit)


def listing(store: EpisodeStore, filters: Filters, limit: int) -> str:
    """The episodes that match, newest first (at most `limit` rows), and a count of all of them."""
    matching = asdict(filters)
    rows = store.find(limit=limit, **matching)
    if not rows:
        return f"no recorded episode in {store.root} matches" + ("" if filters == Filters() else " these filters")
    rescores = store.rescores()
    table: list[tuple[str, ...]] = [("ended", "episode", "task", "split", "status", "cause", "reward", "run")]
    table += [
        (
            time.strftime("%m-%d %H:%M:%S", time.localtime(r.ended_at)),
            r.episode_id,
            r.task_id,
            r.split or "-",
            r.status or "-",
            r.cause or "-",
            "-" if r.reward is None else f"{r.reward:g}",
            r.run,
        )
        for r in rows
    ]
    if rescores:  # `corral rescore` ran here: the new reward beside the old, the changed ones marked
        table = [(*table[0][:7], "rescored", table[0][7])] + [
            (*row[:7], _rescored(rescores.get(r.episode_id)), row[7]) for r, row in zip(rows, table[1:], strict=True)
        ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in table]
    tally = store.tally(**matching)
    if tally.records > len(rows):
        lines.append(f"... {tally.records - len(rows)} more (--limit to see more, filters to see fewer)")
    counts = ", ".join(f"{n} {status}" for status, n in tally.statuses.items())
    mean = "" if tally.mean_reward is None else f"; mean reward {tally.mean_reward:.3f}"
    lines.append(f"{tally.records} episodes ({counts}) over {tally.tasks} tasks{mean}")
    if rescores:
        changed = sum(rescore.changed for rescore in rescores.values())
        lines.append(f"{len(rescores)} re-scored by `corral rescore`, {changed} with a changed reward (marked *)")
    return "\n".join(lines)


def _rescored(rescore: RescoreRecord | None) -> str:
    """An episode's latest re-score as the listing shows it: its reward (* when it changed), or how it ended."""
    if rescore is None:
        return "-"
    if rescore.status != "rescored" or rescore.reward is None:
        return rescore.status
    return f"{rescore.reward:g}" + (" *" if rescore.changed else "")


def runs(store: EpisodeStore) -> str:
    """The runs recorded in `store`, one line each: name, kind, records, source."""
    lines = [f"{run.run}  {run.kind:<8}  {run.records:>7} records  {run.source}" for run in store.runs()]
    return "\n".join(lines) or f"no runs recorded in {store.root}"


def transcript(store: EpisodeStore, episode_id: str) -> str:
    """One episode, readable: prompts, every call with its answer and timing, the ending and the
    trainer's tokens when it recorded them. An id may be given by its unique prefix."""
    full = store.resolve(episode_id)
    return record_doc(store.episode(full), store.rollout(full)).text()


def export(store: EpisodeStore, kind: str, path: Path, filters: Filters, *, per_task: int, seed: int) -> str:
    """Write SFT conversations (`sft`) or RL trajectories (`rl`) as JSON lines."""
    if kind == "sft":
        data = sft_dataset(
            store, per_task=per_task, min_reward=filters.min_reward, seed=seed, run=filters.run, split=filters.split
        )
    else:
        _refuse_without_rollouts(store, filters)
        data = rl_dataset(store, run=filters.run, split=filters.split)
    written = write_jsonl(data, path)
    return f"wrote {written} {'conversations' if kind == 'sft' else 'trajectories'} to {path}"


def export_by_difficulty(request: Request, choice: Difficulty) -> str:
    """Write SFT rows (`sft`) or RL prompts (`prompts`) chosen by each task's pass rate, as JSON lines."""
    filters = request.filters
    where = EpisodeFilter(
        task=filters.task, split=filters.split, min_reward=filters.min_reward, max_reward=filters.max_reward
    )
    runs = [filters.run] if filters.run else None
    index = RunIndex(request.folder, request.rollouts, success=choice.success)
    try:
        refused: list[str] = []
        if request.export == "sft":
            rows, refused = sft_rows(index, choice, runs, where)
        else:
            rows = rl_prompts(index, choice, runs, where)
    finally:
        index.close()
    assert request.out is not None
    with open(request.out, "w", encoding="utf-8") as file:
        file.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    left_out = (
        f"; {len(refused)} left out: a tool call without a function name ({', '.join(refused[:3])})" if refused else ""
    )
    return f"wrote {len(rows)} {'conversations' if request.export == 'sft' else 'prompts'} to {request.out}{left_out}"


def by_difficulty(
    min_pass: float | None,
    max_pass: float | None,
    min_step: int | None,
    max_step: int | None,
    per_prompt: int,
    target: int | None,
    by_tool_calls: bool,
    success: float,
    seed: int,
) -> Difficulty | None:
    """The difficulty export `corral episodes` was asked for; None when no option of it was given."""
    given = (min_pass, max_pass, min_step, max_step, target)
    if all(value is None for value in given) and per_prompt == 1 and not by_tool_calls:
        return None
    return Difficulty(
        min_pass=0.0 if min_pass is None else min_pass,
        max_pass=1.0 if max_pass is None else max_pass,
        min_step=min_step,
        max_step=max_step,
        per_prompt=per_prompt,
        target=target,
        by_tool_calls=by_tool_calls,
        seed=seed,
        success=success,
    )


def _refuse_without_rollouts(store: EpisodeStore, filters: Filters) -> None:
    """ConfigError saying where the trainer's rollouts are when `store` has none (to match):
    an RL export is their token ids, which the server's records of episodes do not hold."""
    if store.tally(kind="rollouts").records == 0:
        raise ConfigError(
            f"--export rl writes the trainer's rollouts (their token ids), and {store.rollouts_root} holds none, only "
            "the server's episodes: pass the folder the trainer recorded in (CorralRollout(record_dir=...), corral "
            "eval --record) with --rollouts DIR"
        )
    if store.tally(kind="rollouts", run=filters.run, split=filters.split).records == 0:
        raise ConfigError(
            f"no rollout recorded in {store.rollouts_root} is of this --run and --split; "
            f"list the runs with: corral episodes {store.root} --runs"
        )
