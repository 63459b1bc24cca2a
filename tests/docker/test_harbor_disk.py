"""What an agent writes to a Harbor task's container root is bounded (docker_disk.py): past the
limit the container is stopped and the episode ends at the failure score, saying why; under it
the solution still scores 1."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sandboxes.docker_disk import POLL_S
from corral.server.embedded import EmbeddedServer
from tests.conftest import FIXTURES, serving
from tests.docker.conftest import containers, instance_of, poll
from tests.docker.test_harbor_attacks import SOLVE
from tests.wire import called, opened, ws

pytestmark = pytest.mark.docker

LIMIT_MB = 32
TASK = "csv-stats"


@pytest.fixture(scope="module")
def small_disk(docker_engine, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("harbor-disk") / "tasks"
    root.mkdir()
    (root / "bundle.toml").write_text(
        'name = "harbor-disk"\n[base_images]\n"python:3.12-slim" = { build = "_images/shared" }\n'
        f"[resources]\ndisk_mb = {LIMIT_MB}\n"
    )
    shutil.copytree(FIXTURES / "harbor" / "_images", root / "_images")
    shutil.copytree(FIXTURES / "harbor" / TASK, root / TASK)
    yield from serving(Path(root), sandbox="docker")


def test_an_agent_that_writes_past_the_container_s_disk_limit_is_stopped_and_scores_0(small_disk, docker_engine):
    with ws(small_disk) as socket:
        opened(socket, task_id=TASK)
        filled = called(
            socket, "bash", command=f"{SOLVE} && head -c {4 * LIMIT_MB}M /dev/zero > /fill; sleep {4 * POLL_S:g}"
        )
        ended = called(socket, "end_turn", response="done")

    assert "the container may have stopped" in filled.result, filled.result
    assert (ended.status, ended.reward) == ("scored", 0.0), ended
    assert f"more than its limit of {LIMIT_MB} MB" in ended.metadata["verifier_output"]["reward"], ended.metadata
    poll(lambda: not containers(docker_engine, corral_instance=instance_of(small_disk)), what="the container's removal")


def test_the_solution_under_the_limit_still_scores_1(small_disk):
    with ws(small_disk) as socket:
        opened(socket, task_id=TASK)
        called(socket, "bash", command=f"{SOLVE} && head -c {LIMIT_MB // 2}M /dev/zero > /fill; sleep {2 * POLL_S:g}")
        ended = called(socket, "end_turn", response="done")

    assert ended.reward == 1.0, ended
