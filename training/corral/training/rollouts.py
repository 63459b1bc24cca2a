"""Token-exact multi-turn rollouts: a `rollout_func` for TRL's GRPOTrainer that plays whole
episodes against a corral server.

    rollout = CorralRollout(env)                  # env: a Bundle (remote URL or Bundle.local)
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=rollout.dataset,
                          reward_funcs=episode_reward, rollout_func=rollout)

Per rollout: the chat template is applied once, to the prompt and the tools the server offers;
every sampled id is appended as it was sampled (its logprob kept); what the server answers (tool
results, the next turn's prompt) is rendered by the `Processor` as a chunk of ids of its own and
masked out of the loss (`env_mask` 0, logprob 0). The episode's reward is the server's, returned
under `episode_reward` for the `episode_reward` reward function. Each step's rollouts are counted
(`accounting.StepAccount`) into the trainer's logs.

TRL hands `rollout_func` the prompts only, not the dataset rows, so a prompt must say which task
it is: `rollout.dataset` tags each row's last message with its `task_id` (chat templates ignore
the extra key). An untagged prompt is matched to a task by its text, when exactly one task has it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trl.models.utils import unwrap_model_for_generation

from corral.client import Bundle, EnvironmentSpec, Episode, Session
from corral.client.catalog import Toolset, ToolSpec
from corral.client.protocol import ResetData
from corral.errors import ConfigError
from corral.training.accounting import StepAccount
from corral.training.generation import Generator, SamplingParams, TransformersGenerator
from corral.training.processors import HermesProcessor, Message, Processor

log = logging.getLogger("corral.training")

TASK_KEY = "task_id"
"""The key of a prompt's last message that names its task (see `CorralRollout.dataset`)."""


@dataclass
class Rollout:
    """One episode as the trainer sees it, and what it came to.

    `completion_ids[i]` was sampled by the model where `env_mask[i]` is 1 (with `logprobs[i]`),
    and rendered from the server's answer where it is 0 (logprob 0). `messages` is the
    conversation and `tools` the tools offered; decoding `prompt_ids + completion_ids` gives the
    chat template's rendering of them.
    """

    task_id: str
    toolset: str
    prompt_ids: list[int]
    tools: list[dict[str, Any]] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    reward: float | None = None
    unscored_reason: str | None = None
    truncated: str | None = None  # the limit that stopped it: "completion_length" or "tool_calls"
    tool_calls: int = 0
    tool_errors: int = 0

    def add(self, ids: list[int], *, sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.completion_ids += ids
        self.env_mask += [int(sampled)] * len(ids)
        self.logprobs += list(logprobs) if sampled and logprobs is not None else [0.0] * len(ids)


@dataclass(frozen=True)
class RolloutLimits:
    """Where an episode is cut: total completion ids (sampled and rendered), and tool calls
    (end_turn included). A cut episode's open turns are ended with empty replies, so the server
    scores what the model did, and the rollout is counted as truncated."""

    max_completion_length: int
    max_tool_calls: int


def episode_reward(completions: list[Any], episode_reward: list[float | None], **_: Any) -> list[float | None]:
    """The reward function of `CorralRollout`: each episode's reward from the server (None: it
    ended unscored, and TRL leaves it out of its group)."""
    return list(episode_reward)


class CorralRollout:
    """A `rollout_func` for `GRPOTrainer` that plays each prompt's task as a whole episode.

    Args:
        bundle: The served bundle (`Bundle(url)` or `Bundle.local(path)`); its server must allow as
            many sessions at once as the trainer generates rollouts at once.
        processor: Renders and parses for the model's chat template; by default a
            `HermesProcessor` (Qwen) on the trainer's tokenizer and chat template.
        generator: Samples continuations; by default HF `generate` on the trainer's model with the
            trainer's temperature, top-p and top-k. Pass a `VLLMGenerator` for a vLLM server.
        max_tool_calls: Tool calls (end_turn included) an episode may make before it is cut.
        max_completion_length: Completion ids an episode may reach before it is cut; by default
            the trainer's `max_completion_length`.
    """

    def __init__(
        self,
        bundle: Bundle,
        *,
        processor: Processor | None = None,
        generator: Generator | None = None,
        max_tool_calls: int = 16,
        max_completion_length: int | None = None,
    ):
        self.bundle = bundle
        self.processor = processor
        self.generator = generator
        self.max_tool_calls = max_tool_calls
        self.max_completion_length = max_completion_length
        self.history: list[StepAccount] = []
        self.last_rollouts: list[Rollout] = []
        self._tasks: dict[str, dict[str, Any]] = {}
        self._by_text: dict[str, dict[str, None]] = {}  # prompt text -> the ids of the tasks with it, in order
        self._datasets: dict[str, Any] = {}
        self._sessions: list[Session] = []
        # What a session needs, per toolset of the split: URL, token, limits, reward rule.
        self._specs: dict[str, EnvironmentSpec] = {name: bundle.environment_spec(name) for name in bundle.split_toolsets}

    @property
    def dataset(self):
        """The bundle's split as a dataset whose prompts name their task (train on this one)."""
        return self.dataset_for(self.bundle.split)

    def dataset_for(self, split: str):
        """Another split's tasks, tagged the same way (e.g. an `eval_dataset`)."""
        if split not in self._datasets:
            dataset = self.bundle.dataset_for(split)
            default_toolset = next(iter(self._specs))
            for row in dataset:
                self._tasks[row["task_id"]] = {**row, "toolset": row.get("environment") or default_toolset}
                self._by_text.setdefault(_text_key(row["prompt"]), {})[row["task_id"]] = None

            def tag(row: dict[str, Any]) -> dict[str, Any]:
                prompt = [dict(message) for message in row["prompt"]]
                prompt[-1][TASK_KEY] = row["task_id"]
                return {"prompt": prompt}

            self._datasets[split] = dataset.map(tag)
        return self._datasets[split]

    def __call__(self, prompts: list[list[Message]], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt, all at once; return what GRPOTrainer trains on."""
        if self.processor is None:
            self.processor = HermesProcessor.for_trainer(trainer.processing_class, trainer.args.chat_template_kwargs)
        length = self.max_completion_length or trainer.args.max_completion_length
        if self.generator is not None:
            rollouts = self.play(prompts, max_completion_length=length)
        elif trainer.args.use_vllm:
            raise ConfigError(
                "with use_vllm=True, pass CorralRollout(generator=VLLMGenerator(url, model)) for the vLLM server "
                "(vllm_mode='server'); CorralRollout does not drive colocated vLLM"
            )
        else:
            # The trainer's own model, unwrapped as TRL unwraps it to generate (gradient
            # checkpointing off, ZeRO-3 weights gathered).
            with unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model:
                generator = TransformersGenerator(model, SamplingParams.from_trainer_args(trainer.args))
                rollouts = self.play(prompts, generator=generator, max_completion_length=length)
        training = trainer.model.training
        self._account(rollouts, trainer._metrics["train" if training else "eval"],
                      trainer.num_generations if training else trainer.num_generations_eval)
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": [r.logprobs for r in rollouts],
            "env_mask": [r.env_mask for r in rollouts],
            "episode_reward": [r.reward for r in rollouts],
        }

    def play(self, prompts: list[list[Message]], *, generator: Generator | None = None,
             max_completion_length: int | None = None) -> list[Rollout]:
        """Play one episode per prompt, concurrently, one session each; also usable by hand.

        Needs a processor (the trainer's default is filled in by the first `__call__`) and a
        generator (this call's, else the one this rollout_func was made with);
        `max_completion_length` defaults to the one it was made with.
        """
        generator = generator or self.generator
        if self.processor is None or generator is None:
            raise ConfigError("play needs a processor and a generator: pass them to CorralRollout(...)")
        length = max_completion_length or self.max_completion_length
        if length is None:
            raise ConfigError("play needs max_completion_length (the trainer's, when called as rollout_func)")
        limits = RolloutLimits(length, self.max_tool_calls)
        tasks = [self.task_of(prompt) for prompt in prompts]
        while len(self._sessions) < len(prompts):
            spec = next(iter(self._specs.values()))
            self._sessions.append(Session(spec.url, token=spec.token, keepalive_s=spec.keepalive_s))
        processor = self.processor

        def play_one(session: Session, task: dict[str, Any], prompt: list[Message]) -> Rollout:
            spec = self._specs[task["toolset"]]
            return _RolloutPlayer(session, spec, task, processor, generator, limits).play(prompt)

        with ThreadPoolExecutor(max_workers=len(prompts), thread_name_prefix="corral-episode") as pool:
            rollouts = list(pool.map(play_one, self._sessions[: len(prompts)], tasks, prompts))
        self.last_rollouts = rollouts
        return rollouts

    def close(self) -> None:
        """End the sessions this rollout_func holds on the server."""
        for session in self._sessions:
            session.close()
        self._sessions = []

    def task_of(self, prompt: list[Message]) -> dict[str, Any]:
        """The task a prompt is: by its tag (see `dataset`), else by its text if one task has it."""
        if not self._tasks:
            self.dataset_for(self.bundle.split)
        task_id = prompt[-1].get(TASK_KEY) if prompt else None
        if task_id is not None:
            if task_id not in self._tasks:
                raise ConfigError(
                    f"the prompt names task {task_id!r}, which is in no split loaded so far "
                    f"({', '.join(sorted(self._datasets))}): load its split with rollout.dataset_for(split) first"
                )
            return self._tasks[task_id]
        matches = list(self._by_text.get(_text_key(prompt), {}))
        if len(matches) == 1:
            return self._tasks[matches[0]]
        text = json.dumps(prompt)[:300]
        if not matches:
            raise ConfigError(
                f"the prompt {text} matches no task of bundle {self.bundle.name} (splits loaded: "
                f"{sorted({t['split'] for t in self._tasks.values()})}): train on rollout.dataset (and evaluate "
                "on rollout.dataset_for(split)), whose prompts name their task, or keep the tasks' prompt text"
            )
        raise ConfigError(
            f"the prompt {text} is the prompt of {len(matches)} tasks ({', '.join(matches[:5])}, ...), so the "
            f"text cannot say which to play: train on rollout.dataset, whose prompts name their task"
        )

    def _account(self, rollouts: list[Rollout], metrics: dict[str, list[float]], group_size: int) -> None:
        account = StepAccount.of(rollouts, group_size)
        self.history.append(account)
        # Into TRL's own metric buffer (trainer._metrics): logged with its rewards, averaged over
        # the logging window, to every reporter the trainer has (W&B, trackio, ...).
        for key, value in account.metrics().items():
            metrics[key].append(value)
        if account.unscored or account.truncated:
            log.warning("rollouts: %s", account.summary())


class _RolloutPlayer:
    """One rollout on one session: the loop of sampling, tool calls and rendered answers."""

    def __init__(self, session: Session, spec: EnvironmentSpec, task: dict[str, Any], processor: Processor,
                 generator: Generator, limits: RolloutLimits):
        self.episode = Episode(session, spec.server_limits, reward=spec.reward, capacity_wait_s=spec.capacity_wait_s)
        self.spec = spec
        self.task = task
        self.processor = processor
        self.generator = generator
        self.limits = limits
        self.rollout: Rollout

    def play(self, prompt: list[Message]) -> Rollout:
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
        opened = self.episode.start(ResetData(
            split=self.task["split"], index=self.task["index"], task_id=self.task["task_id"],
            tool_timeout_s=self.spec.tool_timeout_s, reset_timeout_s=self.spec.reset_timeout_s,
        ))
        tools = [_function(tool) for tool in opened.offered_tools]
        self.rollout = rollout = Rollout(self.task["task_id"], self.task["toolset"],
                                         self.processor.render_prompt(messages, tools), tools, messages=messages)
        if opened.done:  # the env could not start: nothing to sample; one masked id keeps TRL's shapes
            rollout.add(self.processor.stop_token_ids[:1], sampled=False)
            return self._scored(rollout)
        while self.episode.open:
            budget = self.limits.max_completion_length - len(rollout.completion_ids)
            if budget <= 0:
                rollout.truncated = "completion_length"
                break
            sample = self.generator.generate(rollout.prompt_ids + rollout.completion_ids, max_new_tokens=budget,
                                             stop_token_ids=self.processor.stop_token_ids)
            rollout.add(sample.token_ids, sampled=True, logprobs=sample.logprobs)
            if not sample.stopped:  # cut mid-turn: kept as the text it is, its calls not run
                rollout.messages.append({"role": "assistant", "content": self.processor.parse(sample.token_ids).text})
                rollout.truncated = "completion_length"
                break
            turn = self.processor.parse(sample.token_ids)
            rollout.messages.append(turn.message())
            answers = self._answer(turn)
            if not self.episode.open or rollout.truncated:
                break
            chunk = self.processor.render_env_turn(answers)
            if len(rollout.completion_ids) + len(chunk) >= self.limits.max_completion_length:
                rollout.truncated = "completion_length"  # no room left to sample after the answer
                break
            rollout.add(chunk, sampled=False)
            rollout.messages += answers
        self.episode.finish()  # a limit cut it: end its turns, so the server scores what the model did
        return self._scored(rollout)

    def _answer(self, turn) -> list[Message]:
        """Run the turn's tool calls; a reply without one ends the turn with its text as the response."""
        if not turn.tool_calls:
            if not self._count_call():
                return []
            observed = self.episode.end_turn(turn.content)
            return [] if observed.done else [{"role": "user", "content": observed.answer}]
        answers = []
        for call in turn.tool_calls:
            if not self._count_call():
                return []
            if call.error is not None:
                self.rollout.tool_errors += 1
                answers.append({"role": "tool", "name": call.name or "unknown", "content": call.error})
                continue
            observed = self.episode.call(call.name, call.arguments)
            if observed.done:
                return []
            if observed.error is not None:
                self.rollout.tool_errors += 1
            answers.append({"role": "tool", "name": call.name, "content": observed.answer})
        return answers

    def _count_call(self) -> bool:
        if self.rollout.tool_calls >= self.limits.max_tool_calls:
            self.rollout.truncated = "tool_calls"
            return False
        self.rollout.tool_calls += 1
        return True

    def _scored(self, rollout: Rollout) -> Rollout:
        rollout.reward = self.episode.reward
        rollout.unscored_reason = self.episode.reason if self.episode.reward is None else None
        return rollout


def chat_tools(toolset: Toolset) -> list[dict[str, Any]]:
    """A toolset's tools as the rollout renders them in the first prompt (e.g. to SFT on the same
    context): `{"type": "function", "function": {name, description, parameters}}` each."""
    return [_function(tool) for tool in toolset.tools]


def _function(tool: ToolSpec) -> dict[str, Any]:
    """A tool as chat templates take it."""
    schema = tool.input_schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": schema}}


def _text_key(prompt: list[Message]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in prompt])
