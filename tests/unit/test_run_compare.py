"""Two runs side by side: `/compare?run=A&run=B` overlays their mean reward per step on one chart."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from corral.cli.viewer.app import create_viewer
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import RolloutRecord


def _played(root: Path, run: str, rewards: dict[int, list[float]]) -> None:
    writer = RecordWriter(root, "rollouts", run=run)
    for step, values in rewards.items():
        for n, reward in enumerate(values):
            writer.write(RolloutRecord(episode_id=f"{run}-{step}-{n}", task_id="t", reward=reward, step=step, group=0))
    writer.close()


def test_two_runs_reward_curves_share_one_chart_each_with_its_own_points(tmp_path: Path) -> None:
    _played(tmp_path, "lr-1e-6", {0: [0.0, 1.0], 1: [1.0, 1.0]})
    _played(tmp_path, "lr-1e-5", {0: [0.0, 0.0], 1: [0.0, 1.0], 2: [1.0, 1.0]})
    client = TestClient(create_viewer(tmp_path))
    assert "action='/compare'" in client.get("/").text and "value='lr-1e-5'" in client.get("/").text

    page = client.get("/compare", params={"run": ["lr-1e-6", "lr-1e-5"]}).text
    assert page.count("<polyline") == 1 + 1 and page.count("<svg") == 1
    legends = re.findall(r'fill="(#[0-9a-f]+)">([^<]+ mean reward)</text>', page)
    assert [name for _, name in legends] == ["lr-1e-6 mean reward", "lr-1e-5 mean reward"]
    points = {colour: re.findall(rf'fill="{colour}"><title>(step \d+: [0-9.]+)</title>', page) for colour, _ in legends}
    assert list(points.values()) == [
        ["step 0: 0.500", "step 1: 1.000"],
        ["step 0: 0.000", "step 1: 0.500", "step 2: 1.000"],
    ]


def test_a_comparison_of_no_runs_or_more_than_a_chart_draws_is_refused_with_the_limit(tmp_path: Path) -> None:
    client = TestClient(create_viewer(tmp_path))
    refused = client.get("/compare")
    assert refused.status_code == 400 and "tick 1 to 4 runs" in refused.json()["detail"]
    assert client.get("/compare", params={"run": list("abcde")}).status_code == 400
