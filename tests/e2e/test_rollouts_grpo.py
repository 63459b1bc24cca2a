"""CorralRollout as GRPOTrainer's rollout_func: real TRL, a tiny model, on the CPU, against Bundle.local."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from corral.client import Bundle
from corral.training.rollouts import TASK_KEY, CorralRollout, Rollout, chat_tools, episode_reward
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import BUNDLES
from tests.e2e.support import CPU_RUN

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]
GROUP = 4


def test_rollout_func_trains_two_grpo_steps_on_gridsim_with_the_servers_rewards(tmp_path: Path) -> None:
    from trl import GRPOConfig, GRPOTrainer

    with Bundle.local(BUNDLES / "gridsim", split="train", sandbox="local", max_concurrent_envs=GROUP) as env:
        rollout = CorralRollout(env, max_tool_calls=4)
        # A short prompt keeps the tiny model's CPU steps fast; the task it is stays named on it.
        dataset = rollout.dataset.select(range(2)).map(
            lambda row: {
                "prompt": [
                    {"role": "user", "content": f"Submit a schedule for {row['task_id']}.", TASK_KEY: row["task_id"]}
                ]
            }
        )
        model_dir = make_tiny_model(tmp_path / "model")
        tools = chat_tools(env.toolsets["gridsim"])
        lessons = [
            Lesson(
                prompt=[{"role": "user", "content": m[0]["content"]}],
                tool="submit_schedule",
                arguments={"actions": [0] * 24},
            )
            for m in dataset["prompt"]
        ]
        teach_tool_call(model_dir, lessons, tools, steps=150)

        played: list[list[Rollout]] = []

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            output = rollout(prompts, trainer)
            played.append(rollout.last_rollouts)
            return output

        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            max_steps=2,
            per_device_train_batch_size=GROUP,
            num_generations=GROUP,
            max_completion_length=256,
            chat_template_kwargs={"enable_thinking": False},
            **CPU_RUN,
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            args=args,
            train_dataset=dataset,
            reward_funcs=episode_reward,
            rollout_func=rollout_func,
        )
        with one_cpu_thread():
            trainer.train()
        rollout.close()

    assert trainer.state.global_step == 2 and len(played) == 2
    steps = [entry for entry in trainer.state.log_history if "rewards/episode_reward/mean" in entry]
    assert len(steps) == 2
    for entry, rollouts in zip(steps, played, strict=True):
        assert len(rollouts) == GROUP and {r.task_id for r in rollouts} <= set(dataset["task_id"])
        rewards = [r.reward for r in rollouts if r.reward is not None]
        assert rewards, [r.unscored_reason for r in rollouts]
        # What TRL logged is the mean of what the server scored (an idle day 0.2, nothing valid 0).
        assert entry["rewards/episode_reward/mean"] == pytest.approx(sum(rewards) / len(rewards))
        assert entry["rollouts/scored"] == len(rewards)
        # TRL counted only the sampled ids as the completion: it used the env mask.
        sampled = [sum(r.env_mask) for r in rollouts]
        assert entry["completions/mean_length"] == pytest.approx(sum(sampled) / len(sampled))
    # Some rollouts called a tool and read its answer: those ids are in the completion, masked.
    answered = [r for rollouts in played for r in rollouts if 0 in r.env_mask]
    assert answered and all(r.tool_calls >= 1 for r in answered)
