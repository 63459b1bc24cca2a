"""Every viewer page starts with its breadcrumbs: runs / run / step / group / episode, each a link
to its page, as far as the page's place is known."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from corral.cli.viewer.app import create_viewer
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import EpisodeRecord, RolloutRecord


def _crumbs(page: str) -> list[tuple[str, str]]:
    nav = page[page.index("<nav id='crumbs'>") : page.index("</nav>")]
    return re.findall(r"href='([^']*)'>([^<]*)</a>", nav)


def _viewer(folder: Path) -> TestClient:
    rollouts = RecordWriter(folder, "rollouts", run="train")
    rollouts.write(RolloutRecord(episode_id="e1", run="train", task_id="t", step=3, group=1, group_index=0))
    rollouts.close()
    served = RecordWriter(folder, "episodes", run="served")
    served.write(EpisodeRecord(episode_id="e2", run="served", task_id="t", status="scored", cause="scored", reward=1.0))
    served.close()
    return TestClient(create_viewer(folder))


def test_each_page_names_its_place_from_the_runs_down(tmp_path: Path) -> None:
    viewer = _viewer(tmp_path)
    run = [("/", "runs"), ("/runs/train", "run train")]
    step = [*run, ("/runs/train/steps/3", "step 3")]
    group = [*step, ("/runs/train/steps/3/groups/1", "group 1")]
    assert _crumbs(viewer.get("/").text) == [("/", "runs")]
    assert _crumbs(viewer.get("/runs/train").text) == run
    assert _crumbs(viewer.get("/runs/train/steps/3").text) == step
    assert _crumbs(viewer.get("/runs/train/steps/3/groups/1").text) == group
    assert _crumbs(viewer.get("/episodes/e1").text) == [*group, ("/episodes/e1", "episode e1")]


def test_an_episode_only_a_server_recorded_has_its_run_and_itself(tmp_path: Path) -> None:
    crumbs = _crumbs(_viewer(tmp_path).get("/episodes/e2").text)
    assert crumbs == [("/", "runs"), ("/runs/served", "run served"), ("/episodes/e2", "episode e2")]


def test_a_crumb_escapes_the_run_s_name(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path, "rollouts", run="<b>r")
    writer.write(RolloutRecord(episode_id="e", run="<b>r", task_id="t", step=0, group=0, group_index=0))
    writer.close()
    page = TestClient(create_viewer(tmp_path)).get("/episodes/e").text
    assert "<b>r" not in page and "run &lt;b&gt;r" in page
