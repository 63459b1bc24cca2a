"""A real tiny GRPO run through a served bundle, recorded: what the records and viewer tests read.

The server (`Bundle.local(..., record_dir=)`) writes its episodes and `CorralRollout` the trainer's
rollouts into one folder. The tiny model is taught the tool call part way, so that members of a
group differ (some submit a schedule, some do not) and the advantages are not all zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.client import Bundle
from corral.training.metrics_callback import RecordMetrics
from corral.training.rollouts import TASK_KEY, CorralRollout, chat_tools, episode_reward
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import BUNDLES
from tests.e2e.support import CPU_RUN

GROUP = 2  # num_generations
BATCH = 4  # rows per step: two groups
STEPS = 3
SUCCESS = 0.1  # the all-zeros schedule the model is taught scores above it, no schedule 0: pass@1 varies


@dataclass
class RecordedRun:
    records: Path
    run: str  # the trainer's run in the records
    advantages: list[list[float]]  # what TRL computed, per step, in the batch's order
    num_generations: int
    steps: int
    model: Path  # the tiny model's folder, its tokenizer with it
    headed: list[bool]  # per step: the run's header was on disk while it trained
    log_history: list[dict[str, Any]]  # the trainer's log (trainer.state.log_history)


def record_grpo_run(folder: Path) -> RecordedRun:
    """Train the tiny model `STEPS` GRPO steps on gridsim, recording both sides into `folder/records`."""
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    records = folder / "records"
    with Bundle.local(
        BUNDLES / "gridsim", split="train", sandbox="local", max_concurrent_envs=BATCH, record_dir=records
    ) as env:
        rollout = CorralRollout(env, max_tool_calls=3, record_dir=records, success=SUCCESS)
        dataset = rollout.dataset.select(range(2)).map(
            lambda row: {
                "prompt": [
                    {"role": "user", "content": f"Submit a schedule for {row['task_id']}.", TASK_KEY: row["task_id"]}
                ]
            }
        )
        model_dir = make_tiny_model(folder / "model")
        lessons = [
            Lesson(
                prompt=[{"role": "user", "content": m[0]["content"]}],
                tool="submit_schedule",
                arguments={"actions": [0] * 24},
            )
            for m in dataset["prompt"]
        ]
        teach_tool_call(model_dir, lessons, chat_tools(env.toolsets["gridsim"]), steps=120)
        advantages: list[list[float]] = []
        headed: list[bool] = []

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            if trainer.state.global_step:  # TRL's advantages of the step before, logged after it
                advantages.append(list(trainer._logs["advantages"]))
            played = rollout(prompts, trainer)
            headed.append((records / rollout.records.run / "run.json").is_file())
            return played

        args = GRPOConfig(
            output_dir=str(folder / "out"),
            max_steps=STEPS,
            per_device_train_batch_size=BATCH,
            num_generations=GROUP,
            max_completion_length=384,
            chat_template_kwargs={"enable_thinking": False},
            **CPU_RUN,
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            args=args,
            train_dataset=dataset,
            reward_funcs=episode_reward,
            rollout_func=rollout_func,
            callbacks=[RecordMetrics(rollout)],
        )
        with one_cpu_thread():
            trainer.train()
        advantages.append(list(trainer._logs["advantages"]))
        run = rollout.records.run
        rollout.close()
    return RecordedRun(records, run, advantages, GROUP, STEPS, model_dir, headed, trainer.state.log_history)
