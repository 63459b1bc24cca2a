"""The learning-curve bench in its short mode: every stage runs end to end (a few steps each) and
writes its table, numbers and plot. The full run, and whether the curve rises, is bench/'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

from tests.conftest import REPO

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.mark.timeout(600)  # every stage of a training run: 215 s beside 8 CPU burners on two cores
def test_the_learning_curve_runs_every_stage_in_short_mode(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "learning_curve.py"),
            "--short",
            "--out",
            str(tmp_path),
            "--records",
            str(tmp_path / "records"),
        ],
        # within the test's 600 s: this limit is the one that fires
        check=False,
        capture_output=True,
        text=True,
        timeout=540,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"},
    )

    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "curve.json").read_text())
    stages = [point["stage"] for point in result["points"]]
    assert stages == ["before SFT", "after SFT", "GRPO step 2", "GRPO step 4"]
    for point in result["points"]:
        assert point["episodes"] == 16 and 0.0 <= point["mean_reward"] <= 1.0 and point["unscored"] == 0
    assert len(result["grpo_training_reward"]) == 4
    speed = result["generation_speed"]
    assert speed["batched"]["episodes"] == speed["one at a time"]["episodes"] == 16 and speed["speed-up"] > 0
    assert "| after SFT | 20 |" in (tmp_path / "curve.md").read_text()
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    assert (tmp_path / "records" / "index.sqlite").exists()
