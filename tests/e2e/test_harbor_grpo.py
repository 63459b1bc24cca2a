"""TRL's GRPOTrainer on the CPU against a corral server of Harbor tasks, through `Bundle(url)`:
the tiny model's tool calls run in the tasks' containers, their tests score them, and the
rewards TRL logs are the rewards the server served."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from corral.client import Bundle
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import FIXTURES, serving
from tests.e2e.test_trl_corral import GROUP, grpo_config, recording

pytestmark = [pytest.mark.trl, pytest.mark.docker]
TASKS = ["shell-only", "legacy-wordcount"]
COMMANDS = {"shell-only": "sort -u notes.txt>sorted.txt", "legacy-wordcount": "wc -w<input.txt>count.txt"}


# Two GRPO steps with Harbor containers: 287 s beside 8 CPU burners on two cores (quiet: about a
# minute); pytest's 300 s (pyproject.toml) is too near for a busy laptop.
@pytest.mark.timeout(600)
def test_grpo_trains_two_steps_on_harbor_tasks_with_the_rewards_the_server_served(docker_engine, tmp_path: Path):
    from trl import GRPOTrainer

    for server in serving(FIXTURES / "harbor", sandbox="docker", max_concurrent_envs=GROUP):
        with Bundle(server.url, split="all") as env:
            # A short prompt of the trainer's keeps the tiny model's CPU steps fast; the task is the row's.
            dataset = env.dataset.filter(lambda row: row["task_id"] in TASKS).map(
                lambda row: {"prompt": [{"role": "user", "content": f"Do {row['task_id']} with bash."}]}
            )
            factory = recording(env.factory)
            probe = env.factory()
            tools = [
                probe.bash,
                probe.end_turn,
                probe.read_file,
                probe.replace_in_file,
                probe.write_file,
            ]  # as TRL lists them: by name
            model_dir = make_tiny_model(tmp_path / "model")
            lessons = [
                Lesson(prompt=row["prompt"], tool="bash", arguments={"command": COMMANDS[row["task_id"]]})
                for row in dataset
            ]
            teach_tool_call(model_dir, lessons, tools, steps=160)

            trainer = GRPOTrainer(
                model=str(model_dir),
                args=grpo_config(tmp_path, steps=2),
                train_dataset=dataset,
                environment_factory=factory,
            )
            with one_cpu_thread():
                trainer.train()

    log = factory.log
    assert len(log["resets"]) == 2 * GROUP and set(log["resets"]) <= set(TASKS)
    # Each rollout's call ran in its task's container and its tests scored it: mostly 1, as taught.
    assert all(reward in (0.0, 1.0) for reward in log["rewards"]) and 1.0 in log["rewards"], log["rewards"]
    name = type(probe).__name__
    steps = [entry[f"rewards/{name}/mean"] for entry in trainer.state.log_history if f"rewards/{name}/mean" in entry]
    rewards = log["rewards"]
    assert steps == pytest.approx([sum(rewards[i : i + GROUP]) / GROUP for i in range(0, len(rewards), GROUP)])
