"""Where an eval's rollouts sit: the checkpoint's step, and each task's samples as a group."""

from __future__ import annotations

import json
from pathlib import Path

from corral.training.run_context import checkpoint_step, group_contexts


def test_a_checkpoints_step_is_read_from_its_trainer_state_else_its_name(tmp_path: Path) -> None:
    saved = tmp_path / "out" / "checkpoint-40"
    saved.mkdir(parents=True)
    assert checkpoint_step(saved) == 40
    (saved / "trainer_state.json").write_text(json.dumps({"global_step": 42}))
    assert checkpoint_step(str(saved)) == 42
    assert checkpoint_step(tmp_path / "out") is None
    assert checkpoint_step("http://gpu-box:8001") is None


def test_samples_of_one_task_form_a_group() -> None:
    placed = [(c.group, c.group_index, c.step, c.policy_version) for c in group_contexts(6, 3, 7)]
    assert placed == [(0, 0, 7, 7), (0, 1, 7, 7), (0, 2, 7, 7), (1, 0, 7, 7), (1, 1, 7, 7), (1, 2, 7, 7)]
