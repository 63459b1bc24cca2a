"""Self-check of the TRL chain corral's training side relies on, with no corral server involved.

A tiny Qwen3 model, taught to call a scheduling tool, trains two GRPO steps on CPU through
`GRPOTrainer(environment_factory=...)`: the environment's tool must get called, and the reward TRL
logs for each step must be the mean of what the environment's `get_reward` returned in that step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental"
from corral.training.tiny import (
    CPU_RUN_SETTINGS,
    Lesson,
    make_tiny_model,
    one_cpu_thread,
    sample_tool_calls,
    teach_tool_call,
)

pytestmark = pytest.mark.trl

SYSTEM = "You schedule jobs on machines."
JOBS = {"t0": 3, "t1": 4}
GROUP = 4  # num_generations, and the generation batch: one prompt per step


def user_message(task_id: str) -> str:
    """The user turn of a task's dataset row."""
    return f"Task {task_id}: put every job on machine 0 or 1."


def observation(task_id: str) -> str:
    """What `ScheduleEnv.reset` returns; TRL appends it to the prompt's last message, as is."""
    return f" There are {JOBS[task_id]} jobs."


class ScheduleEnv:
    """Schedules `JOBS[task_id]` jobs; rewarded 1 for a machine (0 or 1) per job, else 0.

    The class attributes record every reset, tool call and reward, in order.
    """

    resets: ClassVar[list[dict[str, Any]]] = []
    calls: ClassVar[list[list[int]]] = []
    rewards: ClassVar[list[float]] = []

    def reset(self, **row: Any) -> str | None:
        """Start the task of a dataset row (all its columns, `prompt` included)."""
        ScheduleEnv.resets.append(row)
        self.jobs = JOBS[row["task_id"]]
        self.actions: list[int] | None = None
        return observation(row["task_id"])

    def submit_schedule(self, actions: list[int]) -> str:
        """Submit the schedule.

        Args:
            actions: Machine index for each job, in job order.
        """
        ScheduleEnv.calls.append(actions)
        self.actions = actions
        return json.dumps({"accepted": len(actions) == self.jobs})

    def get_reward(self) -> float:
        """1.0 when the submitted schedule puts each job on machine 0 or 1, else 0.0."""
        actions = self.actions
        ok = actions is not None and len(actions) == self.jobs and set(actions) <= {0, 1}
        ScheduleEnv.rewards.append(1.0 if ok else 0.0)
        return ScheduleEnv.rewards[-1]


def test_grpo_trains_with_an_environment_factory(tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    for record in (ScheduleEnv.resets, ScheduleEnv.calls, ScheduleEnv.rewards):
        record.clear()
    model_dir = make_tiny_model(tmp_path / "model")
    tools = [ScheduleEnv().submit_schedule]
    lessons = [
        Lesson(
            prompt=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": user_message(task_id) + observation(task_id)},
            ],
            tool="submit_schedule",
            arguments={"actions": [0] * jobs},
            result=json.dumps({"accepted": True}),
        )
        for task_id, jobs in JOBS.items()
    ]
    teach_tool_call(model_dir, lessons, tools, steps=100)
    sampled = sample_tool_calls(model_dir, lessons[0], tools)
    assert sum(call is not None for call in sampled) >= 4, f"teaching failed: {sampled}"

    rows = [
        {
            "prompt": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": user_message(task_id)},
            ],
            "task_id": task_id,
        }
        for task_id in JOBS
    ]
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=64,
        chat_template_kwargs={"enable_thinking": False},
        logging_steps=1,
        save_strategy="no",
        **CPU_RUN_SETTINGS,
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=ScheduleEnv,
    )
    with one_cpu_thread():
        trainer.train()

    assert ScheduleEnv.calls, "the environment's tool was never called"
    assert [sorted(row) for row in ScheduleEnv.resets] == [["prompt", "task_id"]] * 2 * GROUP
    steps = [log for log in trainer.state.log_history if "rewards/ScheduleEnv/mean" in log]
    assert len(steps) == 2
    # TRL counts attempted calls (per rollout), failed ones included: a call whose arguments don't
    # fit the tool's signature fails before reaching the environment.
    attempts = [log["tools/call_frequency"] * GROUP for log in steps]
    failed = [n * log["tools/failure_frequency"] for n, log in zip(attempts, steps, strict=True)]
    assert sum(attempts) - sum(failed) == pytest.approx(len(ScheduleEnv.calls))
    rewards = ScheduleEnv.rewards
    expected = [sum(rewards[i : i + GROUP]) / GROUP for i in range(0, len(rewards), GROUP)]
    assert [log["rewards/ScheduleEnv/mean"] for log in steps] == pytest.approx(expected)
    assert [log["reward"] for log in steps] == pytest.approx(expected)
