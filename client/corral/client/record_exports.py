"""Training data from episode records: SFT conversations and RL trajectories, as `datasets`.

    store = EpisodeStore("records")
    sft = sft_dataset(store, per_task=2, min_reward=1.0, seed=0)    # the best episodes of each task
    write_jsonl(sft, "sft.jsonl")                                     # one conversation a line
    rl = rl_dataset(store)                                            # the trainer's token ids, per rollout

An SFT row is a conversation (`messages`, and the `tools` it offered): the trainer's own record
of it when there is one (the model's words exactly), else rebuilt from the server's record (each
call an assistant turn, each answer a tool turn). An RL row is a rollout's ids, loss mask,
logprobs and reward, from the trainer's records.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from corral.protocol.catalog import END_TURN
from corral.protocol.record_store import EpisodeStore, IndexedRecord
from corral.protocol.records import EpisodeRecord, RolloutRecord


def sft_dataset(
    store: EpisodeStore,
    *,
    per_task: int = 1,
    min_reward: float | None = None,
    seed: int = 0,
    run: str | None = None,
    split: str | None = None,
    max_tasks: int | None = None,
):
    """The best-scoring episodes of each task, as an SFT dataset.

    Args:
        store: The records.
        per_task: The most episodes kept per task (its quota): the best rewards first, ties
            drawn at random with `seed`.
        min_reward: Leave out episodes below it.
        seed: The draw among episodes of equal reward, and of the tasks kept with `max_tasks`.
        run: Only this run's episodes (a name or its prefix).
        split: Only this split's episodes.
        max_tasks: Keep this many tasks at most, drawn with `seed`.

    Returns:
        A `datasets.Dataset`: `messages` and `tools` (JSON columns, so every row keeps its own
        tool-call arguments), `task_id`, `episode_id`, `reward`.
    """
    from datasets import Dataset, Features, Json, Value  # slow to import: only when called

    rng = random.Random(seed)
    by_task: dict[str, list[IndexedRecord]] = defaultdict(list)
    for row in store.find(run=run, split=split, status="scored", min_reward=min_reward):
        by_task[row.task_id].append(row)
    tasks = sorted(by_task)
    if max_tasks is not None and len(tasks) > max_tasks:
        tasks = sorted(rng.sample(tasks, max_tasks))
    rows = []
    for task in tasks:
        candidates = by_task[task]
        rng.shuffle(candidates)  # then a stable sort by reward: equal rewards stay in a random order
        for found in sorted(candidates, key=lambda r: -(r.reward or 0.0))[:per_task]:
            record = store.read(found)
            assert isinstance(record, EpisodeRecord)
            messages, tools = conversation(record, store.rollout(record.episode_id))
            rows.append(
                {
                    "messages": messages,
                    "tools": tools,
                    "task_id": task,
                    "episode_id": record.episode_id,
                    "reward": record.reward,
                }
            )
    features = Features(
        {
            "messages": Json(),
            "tools": Json(),
            "task_id": Value("string"),
            "episode_id": Value("string"),
            "reward": Value("float64"),
        }
    )
    return Dataset.from_list(rows, features=features)


def rl_dataset(
    store: EpisodeStore, *, run: str | None = None, split: str | None = None, include_unscored: bool = False
):
    """The trainer's rollouts as RL trajectories: `prompt_ids`, `completion_ids`, `env_mask` (1
    where the model sampled), `logprobs` (NaN where not computed), `reward`, with `task_id`,
    `episode_id`, `status` and `truncated`. Unscored rollouts are left out unless asked for."""
    from datasets import Dataset

    rows = []
    for found in store.find(kind="rollouts", run=run, split=split):
        record = store.read(found)
        assert isinstance(record, RolloutRecord)
        if record.reward is None and not include_unscored:
            continue
        rows.append(
            {
                "episode_id": record.episode_id,
                "task_id": record.task_id,
                "prompt_ids": record.prompt_ids,
                "completion_ids": record.completion_ids,
                "env_mask": record.env_mask,
                "logprobs": record.logprobs,
                "reward": record.reward,
                "status": record.status,
                "truncated": record.truncated,
            }
        )
    return Dataset.from_list(rows)


def conversation(
    record: EpisodeRecord, rollout: RolloutRecord | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An episode's messages and tools: the trainer's, when it recorded them, else rebuilt from
    the server's calls (an `end_turn` is the assistant's reply; its next prompt, the user's)."""
    if rollout is not None and rollout.messages:
        return rollout.messages, rollout.tools
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": record.system_prompt}] if record.system_prompt else []
    )
    messages.append({"role": "user", "content": record.prompt})
    for call in record.calls:
        if call.tool == END_TURN:
            messages.append({"role": "assistant", "content": str(call.arguments.get("response", ""))})
            if call.prompt is not None:
                messages.append({"role": "user", "content": call.prompt})
            continue
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": call.tool, "arguments": call.arguments}}],
            }
        )
        answer = call.error.message if call.error is not None else call.result or ""
        messages.append({"role": "tool", "name": call.tool, "content": answer})
    if messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": ""})  # the model stops once the tools have answered
    return messages, [tool.as_chat() for tool in record.tools]


def write_jsonl(dataset: Any, path: str | Path) -> int:
    """Write a dataset's rows as JSON lines (JSON columns as objects); returns the rows written."""
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in dataset)
    return len(dataset)
