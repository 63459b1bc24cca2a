"""Supervised warm starts from gold tool calls, on exactly the context GRPO generates from.

A bundle can name, per task, the tool calls a perfect agent makes (GridSim's `gold.py`).
`gold_dataset` plays those calls against a live server through `Bundle.factory`, the same
environment class `GRPOTrainer(environment_factory=...)` drives, and records each episode as a
conversation `SFTTrainer` trains on: the task's prompt, the tools as the trainer offers them
(`trainer_tools`), each assistant call with the server's answer, and a closing assistant turn.
Rendered with the trainer's chat template and `enable_thinking=False`, the prompt of every
conversation is token for token the prompt GRPO samples from, and the server's reward for each
episode is kept, so a gold call that does not earn the optimum shows up before training.

    with Bundle.local("bundles/gridsim", split="train") as env:
        data = gold_dataset(env, calls_by_task)            # calls_by_task: task id -> calls
        SFTTrainer(model=..., args=SFTConfig(assistant_only_loss=True, ...), train_dataset=data)
"""

from __future__ import annotations

import importlib.util
import inspect
import queue
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.client import Bundle
from corral.errors import ConfigError
from corral.protocol.catalog import ENVIRONMENT_METHODS

ToolCall = Mapping[str, Any]
"""A gold call: `{"name": tool name, "arguments": {...}}`, the arguments as the tool's schema types them."""

NO_THINKING = {"enable_thinking": False}


@dataclass(frozen=True)
class GoldEpisode:
    """One gold episode as played on the server.

    Attributes:
        task_id: The task played.
        messages: The dataset row's prompt, then the assistant's calls, the tools' answers and the
            closing assistant turn.
        reward: The server's reward for the episode (`None` when it ended unscored).
    """

    task_id: str
    messages: list[dict[str, Any]]
    reward: float | None


def load_gold_calls(bundle_dir: str | Path, split: str) -> dict[str, list[dict[str, Any]]]:
    """The gold calls of every task of a split, from the bundle's `gold.py`, by task id.

    A bundle with gold answers ships `gold.py` beside `bundle.toml`, defining `tasks(split)` (the
    split's tasks, as in the bundle's task files) and `gold_calls(task)` (the calls that score
    best on it), as GridSim's does. It is loaded by path: a bundle's scripts are not a package.
    """
    path = Path(bundle_dir) / "gold.py"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: this bundle ships no gold answers to warm-start from")
    spec = importlib.util.spec_from_file_location(f"corral_gold_{Path(bundle_dir).name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {task["id"]: module.gold_calls(task) for task in module.tasks(split)}


def trainer_tools(environment: object) -> list[dict[str, Any]]:
    """The tools `GRPOTrainer` offers the model for `environment`, as JSON schemas, in its order.

    The trainer lists the public methods of the environment's class other than `reset` and
    `get_reward` (sorted by name, as `inspect.getmembers` returns them) and renders each with
    transformers' `get_json_schema`; this does the same, so the schemas can sit in a dataset.
    """
    from transformers.utils import get_json_schema  # slow to import: only when called

    return [
        get_json_schema(getattr(environment, name))
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in ENVIRONMENT_METHODS and not name.startswith("_")
    ]


def play_gold(environment: Any, row: Mapping[str, Any], calls: Sequence[ToolCall], closing: str = "") -> GoldEpisode:
    """Play `calls` in order as one episode of `row`'s task, and record the conversation.

    Args:
        environment: An instance of the bundle's environment class (`bundle.factory()`).
        row: The task's dataset row (`bundle.dataset[i]`).
        calls: The assistant's tool calls, one assistant turn each.
        closing: The assistant's last message, after the last tool answer; the empty default
            teaches the model to stop once the tools have answered.
    """
    observation = environment.reset(**row)
    prompt = [dict(message) for message in row["prompt"]]
    if observation:  # GRPOTrainer appends reset's text to the last prompt message, without a separator
        prompt[-1]["content"] += observation
    messages = list(prompt)
    for call in calls:
        name, arguments = call["name"], dict(call["arguments"])
        tool = getattr(environment, name, None)
        if name.startswith("_") or name in ENVIRONMENT_METHODS or not callable(tool):
            raise ConfigError(
                f"gold call {name!r} of task {row['task_id']} names no tool of {type(environment).__name__}"
            )
        answer = tool(**arguments)
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
            }
        )
        messages.append({"role": "tool", "name": name, "content": str(answer)})  # str(): as GRPOTrainer does
    messages.append({"role": "assistant", "content": closing})
    return GoldEpisode(task_id=row["task_id"], messages=messages, reward=environment.get_reward())


def gold_dataset(
    bundle: Bundle,
    calls: Mapping[str, Sequence[ToolCall]] | Callable[[str], Sequence[ToolCall]],
    *,
    split: str | None = None,
    limit: int | None = None,
    min_reward: float | None = None,
    concurrency: int = 1,
    progress: Callable[[int, int], None] | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
):
    """Play the gold calls of a split's tasks on the server and return them as an SFT dataset.

    Args:
        bundle: The served bundle; its `factory` plays the calls (one environment, reused).
        calls: The gold calls per task id, as a mapping or a function of the task id.
        split: The split whose tasks to play; the Bundle's own split by default.
        limit: Play only the split's first `limit` tasks.
        min_reward: Fail, naming the task, when an episode earns less (or ends unscored): a gold
            call that misses the optimum would teach the model a wrong answer.
        concurrency: Episodes played at once, each in its own environment (server session).
        progress: Called as `progress(done, total)` after each episode.
        tools: The tools each conversation shows; by default `trainer_tools`, as
            `GRPOTrainer(environment_factory=...)` renders them. For `CorralRollout`, which renders
            the server's own schemas, pass `chat_tools(bundle.toolsets[name])`.

    Returns:
        A `datasets.Dataset` for `SFTTrainer(args=SFTConfig(assistant_only_loss=True))`: `messages`,
        `tools` and `chat_template_kwargs` (thinking off), stored as JSON so that every row keeps its
        own tool-call arguments; plus `task_id` and the server's `reward`.
    """
    from datasets import Dataset, Features, Json, Value  # slow to import: only when called

    rows = bundle.dataset if split is None else bundle.dataset_for(split)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    if isinstance(bundle.factory, dict):
        raise ConfigError(f"{bundle!r} offers several toolsets; open a Bundle on a split with one toolset")
    lookup = calls if callable(calls) else calls.__getitem__
    environments: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for _ in range(concurrency):
        environments.put(bundle.factory())
    tools = list(tools) if tools is not None else trainer_tools(bundle.factory())

    def play(row: Mapping[str, Any]) -> GoldEpisode:
        environment = environments.get()
        try:
            return play_gold(environment, row, lookup(row["task_id"]))
        finally:
            environments.put(environment)

    records = []
    with ThreadPoolExecutor(concurrency) as executor:
        for done, episode in enumerate(executor.map(play, rows), start=1):
            if min_reward is not None and (episode.reward is None or episode.reward < min_reward):
                raise ConfigError(
                    f"the gold calls of task {episode.task_id} earned {episode.reward} on the server, below the "
                    f"required {min_reward}: fix the bundle's gold answers before training on them"
                )
            records.append(
                {
                    "messages": episode.messages,
                    "tools": tools,
                    "chat_template_kwargs": NO_THINKING,
                    "task_id": episode.task_id,
                    "reward": episode.reward,
                }
            )
            if progress is not None:
                progress(done, len(rows))
    features = Features(
        {
            "messages": Json(),
            "tools": Json(),
            "chat_template_kwargs": Json(),
            "task_id": Value("string"),
            "reward": Value("float64"),
        }
    )
    return Dataset.from_list(records, features=features)


def sampled_tool_calls(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[Mapping[str, Any]]],
    tools: Sequence[Any],
    *,
    samples: int = 1,
    max_new_tokens: int = 256,
    seed: int = 0,
) -> list[list[dict[str, Any]]]:
    """Sample first answers to `prompts` as GRPO would, and parse their tool calls as it does.

    Each prompt is rendered with the template `GRPOTrainer` renders with (TRL's training template
    when the tokenizer's own is not prefix-preserving), the tools, and thinking off; answers are
    sampled at temperature 1 and parsed by TRL's response parser for the template, which types
    the arguments with the tools' schemas.

    Args:
        model: A causal LM (in memory, e.g. the one a trainer is training).
        tokenizer: Its tokenizer.
        prompts: Conversations to answer (dataset rows' `prompt`).
        tools: The tools offered, as the trainer offers them (`trainer_tools(...)`).
        samples: Answers per prompt.
        max_new_tokens: Length limit of an answer.
        seed: Sampling seed.

    Returns:
        Per answer (prompt by prompt, `samples` each), its tool calls: `[]` when it made none or
        none parsed, else `[{"type": "function", "function": {"name", "arguments"}}, ...]`.
    """
    import torch  # torch and TRL are slow to import: only when called
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        parse_response,
    )

    tokenizer = add_response_schema(tokenizer)
    template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
    stop = model.generation_config.eos_token_id or tokenizer.eos_token_id
    stops = set(stop if isinstance(stop, list) else [stop])
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    answers: list[list[dict[str, Any]]] = []
    try:
        for prompt in prompts:
            prompt_ids = tokenizer.apply_chat_template(
                list(prompt),
                tools=list(tools),
                chat_template=template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                **NO_THINKING,
            )
            input_ids = torch.tensor([prompt_ids] * samples, device=model.device)
            with torch.no_grad():
                output = model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row in output[:, len(prompt_ids) :].tolist():
                end = next((i for i, token in enumerate(row) if token in stops), len(row) - 1)
                parsed = parse_response(tokenizer, row[: end + 1], prefix=prompt_ids, tools=list(tools))
                answers.append(list(parsed.get("tool_calls") or []))
    finally:
        model.train(was_training)
    return answers
