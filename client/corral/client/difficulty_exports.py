"""Training data chosen by difficulty: SFT rows or RL prompts from the tasks whose pass rate, over
a window of steps (or the whole run), lies in a band.

    index = RunIndex("records")
    choice = Difficulty(min_pass=0.1, max_pass=0.6, min_step=100, max_step=200, per_prompt=2, target=1000)
    rows = sft_rows(index, choice, runs=["run-a", "run-b"])      # conversations, OpenAI's tool-call shape
    prompts = rl_prompts(index, choice)                           # one row per prompt, to train on again

A prompt is a task (its prompt is the same in every run), so each prompt appears once however
many runs sampled it. The target is filled fairly: every eligible prompt gives its first row
before any gives a second. Which rows a prompt gives, and the order prompts are visited in, are
drawn with `seed` (weighted by tool calls when asked): the same records and seed give the same rows.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from corral.client.record_exports import conversation
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.errors import ConfigError

EVERYTHING = EpisodeFilter()


@dataclass(frozen=True)
class Difficulty:
    """Which prompts and rows to export.

    Attributes:
        min_pass, max_pass: The band of a task's pass rate (passed / scored, in the window) kept.
        min_step, max_step: The window of steps the pass rates (and rows) come from; None: all.
        per_prompt: The most rows one prompt gives.
        target: The rows wanted in all (None: every eligible row, up to `per_prompt` each).
        by_tool_calls: Draw a prompt's rows weighted by their number of tool calls (plus one).
        seed: The draw.
        success: The reward at which an episode passes.
    """

    min_pass: float = 0.0
    max_pass: float = 1.0
    min_step: int | None = None
    max_step: int | None = None
    per_prompt: int = 1
    target: int | None = None
    by_tool_calls: bool = False
    seed: int = 0
    success: float = 1.0


@dataclass(frozen=True)
class Candidate:
    episode_id: str
    run: str
    task_id: str
    step: int | None
    reward: float | None
    tool_calls: int


def pass_rates(
    index: RunIndex, choice: Difficulty, runs: list[str] | None = None, where: EpisodeFilter = EVERYTHING
) -> dict[str, float]:
    """Each task's pass rate over the window: passed / scored, from the index only."""
    clause, values = _window(choice, runs, where)
    rows = index.query(
        f"SELECT task_id, SUM(reward >= ?), COUNT(reward) FROM played WHERE {clause} GROUP BY task_id",
        [choice.success, *values],
    )
    return {task: passed / scored for task, passed, scored in rows if scored}


def choose(
    index: RunIndex,
    choice: Difficulty,
    runs: list[str] | None = None,
    *,
    passed_only: bool,
    where: EpisodeFilter = EVERYTHING,
) -> list[Candidate]:
    """The rows to export, in order: the eligible prompts' rows drawn, then the target filled fairly."""
    rates = pass_rates(index, choice, runs, where)
    eligible = sorted(task for task, rate in rates.items() if choice.min_pass <= rate <= choice.max_pass)
    clause, values = _window(choice, runs, where)
    if passed_only:
        clause += " AND reward >= ?"
        values.append(choice.success)
    rows = index.query(
        f"SELECT episode_id, run, task_id, step, reward, coalesce(tool_calls, 0) FROM played "
        f"WHERE {clause} AND reward IS NOT NULL ORDER BY episode_id",
        values,
    )
    by_prompt: dict[str, list[Candidate]] = defaultdict(list)
    for row in rows:
        by_prompt[row[2]].append(Candidate(*row))
    rng = random.Random(choice.seed)
    drawn = {
        task: _draw(by_prompt[task], rng, choice.by_tool_calls)[: choice.per_prompt]
        for task in eligible
        if by_prompt[task]
    }
    order = sorted(drawn)
    rng.shuffle(order)
    chosen = [drawn[task][rank] for rank in range(choice.per_prompt) for task in order if rank < len(drawn[task])]
    return chosen if choice.target is None else chosen[: choice.target]


def sft_rows(
    index: RunIndex, choice: Difficulty, runs: list[str] | None = None, where: EpisodeFilter = EVERYTHING
) -> tuple[list[dict[str, Any]], list[str]]:
    """Passed episodes of the eligible prompts as conversations; and the ids of those refused
    because a tool call has no function name (they cannot be trained on as OpenAI calls)."""
    rates = pass_rates(index, choice, runs, where)
    rows, refused = [], []
    for found in choose(index, choice, runs, passed_only=True, where=where):
        episode, rollout = index.records(found.episode_id)
        if episode is None:
            messages, tools = (rollout.messages, rollout.tools) if rollout is not None else ([], [])
        else:
            messages, tools = conversation(episode, rollout)
        try:
            messages = [openai_message(m) for m in messages]
        except ConfigError:
            refused.append(found.episode_id)
            continue
        rows.append(
            {
                "messages": messages,
                "tools": tools,
                "task_id": found.task_id,
                "episode_id": found.episode_id,
                "run": found.run,
                "step": found.step,
                "reward": found.reward,
                "pass_rate": rates[found.task_id],
            }
        )
    return rows, refused


def rl_prompts(
    index: RunIndex, choice: Difficulty, runs: list[str] | None = None, where: EpisodeFilter = EVERYTHING
) -> list[dict[str, Any]]:
    """One row per eligible prompt: the messages before the model's first reply, its task, split
    and pass rate (a dataset to train on again, e.g. `CorralRollout`'s prompts by task)."""
    rates = pass_rates(index, choice, runs, where)
    one = replace(choice, per_prompt=1)
    rows = []
    for found in choose(index, one, runs, passed_only=False, where=where):
        episode, rollout = index.records(found.episode_id)
        messages = conversation(episode, rollout)[0] if episode is not None else rollout.messages  # type: ignore[union-attr]
        first_reply = next((n for n, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        split = episode.split if episode is not None else rollout.split  # type: ignore[union-attr]
        rows.append(
            {
                "prompt": messages[:first_reply],
                "task_id": found.task_id,
                "split": split,
                "pass_rate": rates[found.task_id],
            }
        )
    return rows


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its tool calls in OpenAI's nested shape: `{"id", "type": "function",
    "function": {"name", "arguments": JSON text}}`.

    Raises:
        ConfigError: a call has no function name.
    """
    if not message.get("tool_calls"):
        return message
    calls = []
    for number, call in enumerate(message["tool_calls"]):
        function = call.get("function", call)
        name = function.get("name")
        if not name:
            raise ConfigError(f"a tool call has no function name ({json.dumps(call)[:200]}); it cannot be exported")
        arguments = function.get("arguments", {})
        calls.append(
            {
                "id": call.get("id", f"call_{number}"),
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
    return {**message, "tool_calls": calls}


def _draw(candidates: list[Candidate], rng: random.Random, by_tool_calls: bool) -> list[Candidate]:
    """The candidates in a random order; weighted, without replacement, by tool calls plus one
    when asked (Efraimidis-Spirakis: each takes the key u ** (1 / weight), the largest first)."""
    weights = [1.0 + c.tool_calls if by_tool_calls else 1.0 for c in candidates]
    keys = [rng.random() ** (1.0 / w) for w in weights]
    return [c for _, c in sorted(zip(keys, candidates, strict=True), key=lambda pair: -pair[0])]


def _window(choice: Difficulty, runs: list[str] | None, where: EpisodeFilter) -> tuple[str, list[Any]]:
    windowed = replace(
        where,
        min_step=where.min_step if choice.min_step is None else choice.min_step,
        max_step=where.max_step if choice.max_step is None else choice.max_step,
    )
    clause, values = windowed.where()
    if runs:
        clause += f" AND run IN ({', '.join('?' * len(runs))})"
        values += runs
    return clause, values
