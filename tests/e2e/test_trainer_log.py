"""corral's per-step figures in the trainer's own log (what W&B, trackio or TensorBoard are given),
through a real GRPO run on a bundle one of whose tasks the platform cannot start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

from corral.client import Bundle
from corral.client.run_index import RunIndex
from corral.protocol.record_store import EpisodeStore
from corral.training.accounting import UNSCORED_CAUSES
from corral.training.metrics_callback import RecordMetrics
from corral.training.rollouts import CorralRollout, episode_reward
from corral.training.tiny import one_cpu_thread
from tests.conftest import FIXTURES
from tests.e2e.support import CPU_RUN

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]


def test_unscored_episodes_by_cause_reach_the_trainers_log_averaged_over_its_window(
    model_dir: Path, tmp_path: Path
) -> None:
    """Two steps of one group each, logged once: the broken task's step ends its two episodes
    unscored (env_start_failed), the other step none, so the log says 1 of each step's 2 episodes
    on average; every other cause says 0, and the run's metrics.ndjson holds the same line."""
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    records = tmp_path / "records"
    with Bundle.local(FIXTURES / "evalbox", split="eval", sandbox="local", max_concurrent_envs=2) as env:
        rollout = CorralRollout(env, max_tool_calls=2, record_dir=records)
        dataset = rollout.dataset.filter(lambda row: row["prompt"][-1]["task_id"] in ("task-0", "task-broken"))
        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            max_steps=2,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=48,
            chat_template_kwargs={"enable_thinking": False},
            **{**CPU_RUN, "logging_steps": 2},
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            args=args,
            train_dataset=dataset,
            reward_funcs=episode_reward,
            rollout_func=rollout,
            callbacks=[RecordMetrics(rollout)],
        )
        with one_cpu_thread():
            trainer.train()
        run = rollout.records.run
        rollout.close()

    with EpisodeStore(records) as store:
        played = [store.read(row) for row in store.find(kind="rollouts", run=run)]
    assert sorted(r.task_id for r in played) == ["task-0", "task-0", "task-broken", "task-broken"]
    scored = [r.reward for r in played if r.task_id == "task-0"]
    (entry,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    expected = {
        "rollouts/episodes": 2.0,
        "rollouts/unscored": 1.0,
        "rollouts/pass@1": sum(r >= 1.0 for r in scored) / 2,  # the broken step's NaN is left out
        **{f"rollouts/unscored/{cause}": float(cause == "env_start_failed") for cause in UNSCORED_CAUSES},
    }
    assert (entry["step"], {name: entry[name] for name in expected}) == (2, expected)
    assert entry["rollouts/sandbox_seconds"] > 0
    recorded = RunIndex(records).metrics(run)
    assert {name: recorded[name][2] for name in expected} == expected
