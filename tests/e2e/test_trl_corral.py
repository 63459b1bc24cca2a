"""TRL's GRPOTrainer end to end on the CPU against corral servers, with a tiny local model."""

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
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import BUNDLES, FIXTURES, wait_for_no_env_processes
from tests.e2e.support import CPU_RUN

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]
GROUP = 4


def recording(factory: type) -> type:
    """A subclass of a generated environment class, with the same name (TRL names the reward
    column after it), that records every reset and every reward it hands TRL."""
    log: dict[str, list[Any]] = {"resets": [], "rewards": []}

    def reset(self, **row: Any) -> str | None:
        log["resets"].append(row["task_id"])
        return factory.reset(self, **row)

    def get_reward(self) -> float | None:
        log["rewards"].append(factory.get_reward(self))
        return log["rewards"][-1]

    return type(factory.__name__, (factory,), {"reset": reset, "get_reward": get_reward, "log": log})


def grpo_config(tmp_path: Path, steps: int, num_generations: int = GROUP):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=steps,
        per_device_train_batch_size=GROUP,
        num_generations=num_generations,
        max_completion_length=160,
        max_tool_calling_iterations=2,
        chat_template_kwargs={"enable_thinking": False},
        **CPU_RUN,
    )


def test_grpo_trains_two_steps_on_gridsim_with_the_servers_rewards(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    with Bundle.local(BUNDLES / "gridsim", split="train", sandbox="local", max_concurrent_envs=GROUP) as env:
        # A row's prompt is the trainer's to change (the task stays the same): a short one keeps
        # the tiny model's CPU steps fast.
        dataset = env.dataset.select(range(2)).map(
            lambda row: {"prompt": [{"role": "user", "content": f"Submit a schedule for {row['task_id']}."}]}
        )
        factory = recording(env.factory)
        probe = env.factory()
        tools = [probe.end_turn, probe.submit_schedule]  # as TRL lists them: by name
        model_dir = make_tiny_model(tmp_path / "model")
        lessons = [
            Lesson(prompt=row["prompt"], tool="submit_schedule", arguments={"actions": [0] * 24}) for row in dataset
        ]
        teach_tool_call(model_dir, lessons, tools, steps=80)

        trainer = GRPOTrainer(
            model=str(model_dir),
            args=grpo_config(tmp_path, steps=2),
            train_dataset=dataset,
            environment_factory=factory,
        )
        with one_cpu_thread():  # two threads on two busy cores run many times slower
            trainer.train()

        log = factory.log
        assert len(log["resets"]) == 2 * GROUP  # every rollout reset an episode on the server
        assert set(log["resets"]) <= set(dataset["task_id"])
        assert all(reward is not None for reward in log["rewards"])
        # An idle day scores 0.2; no valid submission 0; anything else is a real schedule's grade.
        assert any(reward == pytest.approx(0.2) for reward in log["rewards"]), log["rewards"]
        steps = [entry for entry in trainer.state.log_history if "rewards/gridsim/mean" in entry]
        rewards = log["rewards"]
        expected = [sum(rewards[i : i + GROUP]) / GROUP for i in range(0, len(rewards), GROUP)]
        assert [entry["rewards/gridsim/mean"] for entry in steps] == pytest.approx(expected)
    assert wait_for_no_env_processes() == []


def test_trl_multi_environment_mode_trains_a_step_on_a_bundle_with_two_toolsets(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    with Bundle.local(FIXTURES / "toybox", split="mixed", sandbox="local", max_concurrent_envs=GROUP) as env:
        factories = {name: recording(cls) for name, cls in env.factory.items()}
        trainer = GRPOTrainer(
            model=str(make_tiny_model(tmp_path / "model")),
            args=grpo_config(tmp_path, steps=1, num_generations=2),
            train_dataset=env.dataset,
            environment_factory=factories,
        )
        with one_cpu_thread():
            trainer.train()

        # One step plays both rows, two rollouts each, each row on its own toolset's class.
        assert factories["counter"].log["resets"] == ["count-3"] * 2
        assert factories["toy:say+wait+crash"].log["resets"] == ["say-apple"] * 2
        (step,) = [entry for entry in trainer.state.log_history if "rewards/counter/mean" in entry]
        for name, cls in factories.items():
            rewards = cls.log["rewards"]
            assert step[f"rewards/{name}/mean"] == pytest.approx(sum(rewards) / len(rewards))
