"""A GRPO run's records say where each rollout sat in the run: step, group, policy version, advantage."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

from corral.client.run_index import RunIndex
from corral.protocol.record_store import EpisodeStore
from corral.protocol.records import RolloutRecord
from corral.training.accounting import UNSCORED_CAUSES
from tests.e2e.grpo_run import SUCCESS

pytestmark = [pytest.mark.trl]


def _rollouts(grpo_run) -> list[RolloutRecord]:
    with EpisodeStore(grpo_run.records) as store:
        rows = store.find(kind="rollouts", run=grpo_run.run)
        return [store.read(row) for row in reversed(rows)]  # type: ignore[misc]


def test_every_rollout_record_carries_its_step_group_and_policy_version(grpo_run) -> None:
    records = _rollouts(grpo_run)
    assert len(records) == grpo_run.steps * 4
    assert sorted({r.step for r in records}) == list(range(grpo_run.steps))
    assert all(r.policy_version == r.step for r in records)  # GRPO generates with the step's own weights
    groups: dict[tuple[int, int], list[RolloutRecord]] = defaultdict(list)
    for record in records:
        groups[record.step, record.group].append(record)
    for members in groups.values():
        assert len(members) == grpo_run.num_generations
        assert sorted(m.group_index for m in members) == list(range(grpo_run.num_generations))
        assert len({m.task_id for m in members}) == 1  # a group is one prompt's samples


def test_the_recorded_advantages_are_the_ones_trl_trained_on(grpo_run) -> None:
    records = _rollouts(grpo_run)
    assert any(a != 0 for logged in grpo_run.advantages for a in logged)  # the members of some group differed
    for step, logged in enumerate(grpo_run.advantages):
        batch = sorted((r for r in records if r.step == step), key=lambda r: (r.group, r.group_index))
        assert [r.advantage for r in batch] == pytest.approx(logged, abs=1e-5)


def test_the_servers_records_join_the_rollouts_by_episode_id(grpo_run) -> None:
    with EpisodeStore(grpo_run.records) as store:
        for record in _rollouts(grpo_run):
            assert store.episode(record.episode_id).reward == record.reward


def test_a_grpo_run_says_it_is_training_with_its_model_bundle_and_settings(grpo_run) -> None:
    header = RunIndex(grpo_run.records).header(grpo_run.run)
    assert header is not None and (header.kind, header.bundle, header.split) == ("training", "gridsim", "train")
    assert header.model == str(grpo_run.model) and header.ended_at is not None
    assert header.settings["num_generations"] == grpo_run.num_generations
    assert header.settings["output_dir"] == str(grpo_run.records.parent / "out")
    assert grpo_run.headed == [True] * grpo_run.steps  # written when training starts, not only at its end


def test_the_run_records_the_trainers_loss_beside_corrals_figures_for_each_step(grpo_run) -> None:
    metrics = RunIndex(grpo_run.records).metrics(grpo_run.run)
    steps = list(range(1, grpo_run.steps + 1))
    for name in ("loss", "grad_norm", "entropy", "completions/mean_length"):  # the trainer's half
        assert sorted(metrics[name]) == steps, name
    for name in ("rollouts/groups_zero_variance", "rollouts/unscored"):  # corral's, through TRL's log
        assert sorted(metrics[name]) == steps, name


def test_the_trainers_log_holds_corrals_per_step_figures_as_the_records_count_them(grpo_run) -> None:
    """pass@1, episodes, sandbox and verifier seconds and the unscored by cause of each step reach TRL's
    own log (what W&B or trackio get), and from it the run's metrics.ndjson, equal to what the
    server's records of that step's episodes say."""
    with EpisodeStore(grpo_run.records) as store:
        episodes = {r.episode_id: store.episode(r.episode_id) for r in _rollouts(grpo_run)}
    logged = [entry for entry in grpo_run.log_history if "loss" in entry]
    recorded = RunIndex(grpo_run.records).metrics(grpo_run.run)
    assert [entry["step"] for entry in logged] == list(range(1, grpo_run.steps + 1))
    for entry in logged:
        played = [episodes[r.episode_id] for r in _rollouts(grpo_run) if r.step == entry["step"] - 1]
        scored = [e.reward for e in played if e.reward is not None]
        expected = {
            "rollouts/episodes": len(played),
            "rollouts/pass@1": sum(r >= SUCCESS for r in scored) / len(scored),
            "rollouts/sandbox_seconds": pytest.approx(sum(e.seconds["total"] for e in played), abs=0.01),
            "rollouts/verify_seconds": pytest.approx(sum(e.seconds["verify"] for e in played), abs=0.01),
            **{
                f"rollouts/unscored/{cause}": sum(e.cause == cause and e.status == "unscored" for e in played)
                for cause in UNSCORED_CAUSES
            },
        }
        assert {name: entry[name] for name in expected} == expected
        assert {name: recorded[name][entry["step"]] for name in expected} == expected
        assert entry["rollouts/sandbox_seconds"] > entry["rollouts/verify_seconds"] > 0
    assert any(entry["rollouts/pass@1"] for entry in logged)  # some member passed: groups differed (above)
