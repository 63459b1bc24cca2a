"""Token-exact multi-turn rollouts: a `rollout_func` for TRL's GRPOTrainer that plays whole
episodes against a corral server.

    rollout = CorralRollout(env)                  # env: a Bundle (remote URL or Bundle.local)
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=rollout.dataset,
                          reward_funcs=episode_reward, rollout_func=rollout)

Per rollout: the chat template is applied once, to the prompt and the tools the server offers;
every sampled id is appended as it was sampled (its logprob kept); what the server answers (tool
results, the next turn's prompt) is rendered by the `Processor` as a chunk of ids of its own and
masked out of the loss (`env_mask` 0, logprob 0). The episode's reward is the server's, returned
under `episode_reward` for the `episode_reward` reward function. Each step's rollouts, gathered
from every process, are counted (`accounting.StepAccount`) and logged by that reward function
through TRL's `log_metric`. With `record_dir`, each rollout's tokens are recorded beside the
server's record of its episode (`corral.protocol.record_store`), with its place in the run: the
trainer's step, its GRPO group, the policy version and its advantage (`run_context`).

TRL hands `rollout_func` the prompts only, not the dataset rows, so a prompt must say which task
it is: `rollout.dataset` tags each row's last message with its `task_id` (chat templates ignore
the extra key). An untagged prompt is matched to a task by its text, when exactly one task has it.
"""

from __future__ import annotations

import json
import logging
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from accelerate.utils import gather_object

from corral.client import Bundle, EnvironmentSpec, Session
from corral.client.run_headers import end_header, write_header
from corral.errors import ConfigError
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import RunHeader, TrainingContext
from corral.training.accounting import Outcome, StepAccount
from corral.training.generation import Generator, episode_on, playing
from corral.training.processors import HermesProcessor, Message, Processor
from corral.training.reward_function import episode_reward
from corral.training.rollout_player import Rollout, RolloutLimits, RolloutPlayer, chat_tools
from corral.training.run_context import trainer_advantages, trainer_contexts, trainer_header
from corral.training.trainer_sampling import trainer_policy
from corral.training.weight_sync import FileWeightSync

__all__ = ["TASK_KEY", "CorralRollout", "Rollout", "RolloutLimits", "chat_tools", "episode_reward"]

log = logging.getLogger("corral.training")

TASK_KEY = "task_id"
"""The key of a prompt's last message that names its task (see `CorralRollout.dataset`)."""


class CorralRollout:
    """A `rollout_func` for `GRPOTrainer` that plays each prompt's task as a whole episode.

    Args:
        bundle: The served bundle (`Bundle(url)` or `Bundle.local(path)`); its server must allow as
            many sessions at once as the trainer generates rollouts at once.
        processor: Renders and parses for the model's chat template; by default a
            `HermesProcessor` (Qwen) on the trainer's tokenizer and chat template, ending a turn
            on any of the trainer's EOS ids.
        generator: Samples continuations; by default the trainer's own model, many episodes in one
            padded `generate`, with the trainer's temperature, top-p and top-k, or with
            `use_vllm=True, vllm_mode="server"` the trainer's vLLM server. One that samples a
            policy the trainer does not train is refused.
        max_tool_calls: Tool calls (end_turn included) an episode may make before it is cut.
        max_completion_length: Completion ids an episode may reach before it is cut; by default
            the trainer's `max_completion_length`.
        record_dir: Record each rollout's tokens there (`RolloutRecord`), joined by episode id
            to the server's records (`corral serve --record`); none by default.
        weight_sync: Where NCCL is not available (a CPU trainer): a `FileWeightSync` that pushes
            the trainer's weights to the generator's vLLM server before each generation that
            follows an update (with `use_vllm=False`; see `corral.training.weight_sync`).
        success: The reward at which a scored episode passes, for the `rollouts/pass@1` it logs.
    """

    def __init__(
        self,
        bundle: Bundle,
        *,
        processor: Processor | None = None,
        generator: Generator | None = None,
        max_tool_calls: int = 16,
        max_completion_length: int | None = None,
        record_dir: str | Path | None = None,
        weight_sync: FileWeightSync | None = None,
        success: float = 1.0,
    ):
        self.bundle = bundle
        self.processor = processor
        self.generator = generator
        self.max_tool_calls = max_tool_calls
        self.max_completion_length = max_completion_length
        self.weight_sync = weight_sync
        self.success = success
        self.history: list[StepAccount] = []
        self.last_rollouts: list[Rollout] = []
        self.records = RecordWriter(record_dir, "rollouts", source=bundle.name) if record_dir is not None else None
        self.header: RunHeader | None = None  # written by the first training call (a trainer's run)
        self._tasks: dict[str, dict[str, Any]] = {}
        self._by_text: dict[str, dict[str, None]] = {}  # prompt text -> the ids of the tasks with it, in order
        self._datasets: dict[str, Any] = {}
        self._sessions: list[Session] = []
        # What a session needs, per toolset of the split: URL, token, limits, reward rule.
        self._specs: dict[str, EnvironmentSpec] = {
            name: bundle.environment_spec(name) for name in bundle.split_toolsets
        }

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
        args = trainer.args
        if self.records is not None and self.header is None:
            self.header = trainer_header(trainer, self.records.run, self.bundle.name, self.bundle.split)
            write_header(self.records.root, self.header)
        if self.processor is None:  # a turn may end on any of the model's EOS ids (vLLM stops on them all)
            self.processor = HermesProcessor.for_trainer(
                trainer.processing_class, args.chat_template_kwargs, stop_token_ids=trainer.eos_token_ids
            )
        length = self.max_completion_length or args.max_completion_length
        with trainer_policy(trainer, self.generator, self.weight_sync) as generator:
            rollouts = self.play(
                prompts,
                generator=generator,
                max_completion_length=length,
                contexts=trainer_contexts(trainer, len(prompts)),
                record=False,
            )
        training = trainer.model.training
        # Groups may span processes: count the step over every process's rollouts.
        outcomes = gather_object([Outcome.of(r) for r in rollouts])
        size = trainer.num_generations if training else trainer.num_generations_eval
        account = StepAccount.of(outcomes, size, self.success)
        advantages = trainer_advantages(trainer, [o.reward for o in outcomes])
        first = trainer.accelerator.process_index * len(rollouts)
        for i, rollout in enumerate(rollouts):
            rollout.context.advantage = None if advantages is None else advantages[first + i]
            if self.records is not None:
                self.records.write(rollout.record())
        self.history.append(account)
        if account.unscored or account.failed or account.truncated:
            log.warning("rollouts: %s", account.summary())
        # TRL reads a completion as truncated when its last id is no EOS, but a rollout corral cut ends
        # on the model's own end of turn: with mask_truncated_completions its loss mask is emptied here.
        masked = args.mask_truncated_completions
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": [r.logprobs for r in rollouts],
            "env_mask": [[0] * len(r.env_mask) if masked and r.truncated else r.env_mask for r in rollouts],
            "episode_reward": [r.reward for r in rollouts],
            "rollout_metrics": [account.metrics()] * len(rollouts),
        }

    def play(
        self,
        prompts: list[list[Message]],
        *,
        generator: Generator | None = None,
        max_completion_length: int | None = None,
        concurrency: int | None = None,
        on_rollout: Callable[[Rollout], None] | None = None,
        contexts: Sequence[TrainingContext] | None = None,
        record: bool = True,
    ) -> list[Rollout]:
        """Play one episode per prompt, `concurrency` at once (all by default), one session each;
        also usable by hand.

        Needs a processor (the trainer's default is filled in by the first `__call__`) and a
        generator (this call's, else the one this rollout_func was made with);
        `max_completion_length` defaults to the one it was made with. `on_rollout` is called
        with each rollout as it ends (from its thread). `contexts` (one per prompt) place the
        rollouts in a run; with `record`, each is recorded as it ends (a trainer records its
        batch once the advantages are known).
        """
        generator = generator or self.generator
        if self.processor is None or generator is None:
            raise ConfigError("play needs a processor and a generator: pass them to CorralRollout(...)")
        length = max_completion_length or self.max_completion_length
        if length is None:
            raise ConfigError("play needs max_completion_length (the trainer's, when called as rollout_func)")
        limits = RolloutLimits(length, self.max_tool_calls)
        tasks = [self.task_of(prompt) for prompt in prompts]
        contexts = list(contexts) if contexts is not None else [TrainingContext() for _ in prompts]
        workers = max(1, min(concurrency or len(prompts), len(prompts)))
        while len(self._sessions) < workers:
            spec = next(iter(self._specs.values()))
            self._sessions.append(Session(spec.url, token=spec.token, keepalive_s=spec.keepalive_s))
        free: queue.SimpleQueue[Session] = queue.SimpleQueue()
        for session in self._sessions[:workers]:
            free.put(session)
        processor = self.processor

        def play_one(task: dict[str, Any], prompt: list[Message], context: TrainingContext) -> Rollout:
            session = free.get()
            try:
                with episode_on(generator):
                    rollout = RolloutPlayer(
                        session, self._specs[task["toolset"]], task, processor, generator, limits
                    ).play(prompt)
            finally:
                free.put(session)
            rollout.context = context
            if record and self.records is not None:
                self.records.write(rollout.record())
            if on_rollout is not None:
                on_rollout(rollout)
            return rollout

        with (
            playing(generator, len(prompts), workers),
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="corral-episode") as pool,
        ):
            rollouts = list(pool.map(play_one, tasks, prompts, contexts))
        self.last_rollouts = rollouts
        return rollouts

    def close(self) -> None:
        """End the sessions this rollout_func holds on the server, and close its records."""
        for session in self._sessions:
            session.close()
        self._sessions = []
        if self.records is not None:
            if self.header is not None:
                self.header = end_header(self.records.root, self.header)
            self.records.close()
            self.records = None

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


def _text_key(prompt: list[Message]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in prompt])
