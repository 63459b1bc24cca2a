"""Unscored is no refuge, in containers: what the agent causes (a full disk, processes left at
the pids limit, its memory, a tool past its deadline, its time budget) scores the task's
failure score or the verifier's verdict, never null; the platform's own failures (the engine
stopped mid-episode, an image gone) stay null with their reason."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import Bundle, Episode, Session
from corral.protocol.frames import ResetData
from corral.sandboxes.docker.images import image_tag
from corral.server.bundles.checks import sandbox_spec
from corral.server.formats import load_bundle
from tests.conftest import BUNDLES, serving
from tests.docker.conftest import DOCKERBOX

pytestmark = pytest.mark.docker


def played(bundle: Bundle, task_id: str, *calls: tuple[str, dict], pause_s: float = 0.0) -> Episode:
    """An episode of `task_id` on a session of its own: `calls` made, then its turn ended."""
    episode = Episode(Session(bundle.url), bundle.limits)
    episode.start(ResetData(task_id=task_id, tool_timeout_s=5))
    for name, arguments in calls:
        episode.call(name, arguments)
        time.sleep(pause_s)
    episode.finish()
    episode.session.close()
    return episode


@pytest.fixture(scope="module")
def dockerbox(dockerbox_server) -> Iterator[Bundle]:
    with Bundle(dockerbox_server.url, split="all") as bundle:
        yield bundle


def test_a_full_disk_and_the_pids_limit_used_up_by_leftovers_still_get_the_verdict(dockerbox):
    episode = played(
        dockerbox, "probe", ("fill", {"folder": "/tmp"}), ("leave_running", {"count": 40}), ("say", {"text": "ok"})
    )
    assert (episode.status, episode.reward) == ("scored", 1.0)


@pytest.mark.parametrize(
    ("attack", "arguments", "reason"),
    [
        ("hog", {"megabytes": 1000}, "killed for using more than its memory limit of 96 MB"),
        ("fork_bomb", {}, "fork_bomb didn't answer within 5s"),
    ],
)
def test_an_env_the_agent_broke_scores_the_failure_score(dockerbox, attack, arguments, reason):
    episode = played(dockerbox, "probe", (attack, arguments))
    assert (episode.status, episode.reward) == ("failed", 0.0)
    assert reason in episode.reason


def test_the_time_budget_scores_what_was_left_or_the_tasks_failure_score(dockerbox):
    idle = played(dockerbox, "budget", ("say", {"text": "ok"}), ("say", {"text": "late"}), pause_s=3.5)
    assert (idle.status, idle.reward, idle.reason) == ("scored", 1.0, "the agent's time budget of 3s ran out")
    busy = played(dockerbox, "budget", ("fork_bomb", {}))  # cut at 3 s, its env still busy
    assert (busy.status, busy.reward) == ("failed", -1.0)


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[Bundle]:
    for server in serving(BUNDLES / "shellfix", sandbox="docker", reset_timeout_s=20):
        with Bundle(server.url, split="all") as bundle:
            yield bundle


def solution(task_id: str) -> dict[str, str]:
    return json.loads((BUNDLES / "shellfix" / "solutions" / f"{task_id}.json").read_text())


FILL_AND_LEAVE = (
    "bash",
    {
        "command": "for i in $(seq 40); do setsid sleep 3600 & done; "
        "dd if=/dev/zero of=/repo/full bs=1M 2>/dev/null; "
        "dd if=/dev/zero of=/tmp/full bs=1M 2>/dev/null; echo filled"
    },
)


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "left"])
def test_shellfix_the_fix_plus_a_full_disk_scores_1_and_the_bug_0(shellfix_docker, fixed):
    fix = [("replace_in_file", solution("shellfix-median"))] if fixed else []
    episode = played(shellfix_docker, "shellfix-median", *fix, FILL_AND_LEAVE)
    assert (episode.status, episode.reward) == ("scored", 1.0 if fixed else 0.0), episode.reason


def dockerd_pid() -> int:
    return int(subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=True).stdout.split()[0])


def test_an_engine_that_stops_mid_episode_leaves_it_unscored_with_the_reason(shellfix_docker):
    episode = Episode(Session(shellfix_docker.url), shellfix_docker.limits)
    episode.start(ResetData(task_id="shellfix-median"))
    episode.call("replace_in_file", solution("shellfix-median"))
    engine = dockerd_pid()
    os.kill(engine, signal.SIGSTOP)
    try:
        episode.finish()  # the verification needs the engine, which does not answer
    finally:
        os.kill(engine, signal.SIGCONT)
        episode.session.close()
    assert (episode.status, episode.reward) == ("unscored", None)
    assert "did not finish within 20s" in episode.reason or "Docker engine" in episode.reason


def test_an_image_gone_from_the_engine_leaves_the_reset_unscored(docker_engine, tmp_path):
    bundle = Path(shutil.copytree(DOCKERBOX, tmp_path / "dockerbox"))
    (bundle / "envs" / "plain" / "marker.txt").write_text(str(time.time()))  # an image of its own
    plain = load_bundle(bundle).envs["plain"]
    for server in serving(bundle, sandbox="docker"):  # builds its images before serving
        docker_engine.images.remove(image_tag(sandbox_spec(plain)), force=True)
        with Bundle(server.url, split="plain") as env:
            episode = Episode(Session(env.url), env.limits)
            opened = episode.start(ResetData(split="plain", index=0))
            episode.session.close()
        assert opened.done and (episode.status, episode.reward) == ("unscored", None)
        assert "could not start this task" in episode.reason and "corral build" in episode.reason
