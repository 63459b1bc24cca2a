"""What an agent writes to a Harbor task's container root is bounded (docker/whole_image/disk.py): past the
limit the container is stopped and the episode ends at the failure score, saying why; under it
the solution still scores 1. What it leaves at the turn's end, before the watch sees it, is
measured once more before any commit: a sparse file is never written out to the engine's disk."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sandboxes.docker.whole_image.disk import POLL_S
from corral.server.serving.embedded import EmbeddedServer
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


SPARSE_GIB = 2


def test_a_sparse_file_left_at_the_turn_s_end_scores_0_and_never_reaches_the_engine_s_disk(small_disk, docker_engine):
    root = docker_engine.api.info()["DockerRootDir"]
    base, grown, done = shutil.disk_usage(root).used, [0], threading.Event()

    def sample() -> None:  # the engine's disk, through the verifier's commit (were there one) and the removal
        while not done.is_set():
            grown.append(shutil.disk_usage(root).used - base)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    with ws(small_disk) as socket:
        opened(socket, task_id=TASK)
        # 0 blocks, so no watch's ask before the turn's end changes anything; a commit writes it all.
        called(socket, "bash", command=f"{SOLVE} && truncate -s {SPARSE_GIB}G /sparse")
        sampler.start()
        try:
            ended = called(socket, "end_turn", response="done")
            poll(lambda: not containers(docker_engine, corral_instance=instance_of(small_disk)), what="the removal")
        finally:
            done.set()
            sampler.join()

    assert max(grown) < (SPARSE_GIB << 30) // 4, f"the engine's disk grew by {max(grown) >> 20} MB"
    assert (ended.status, ended.reward) == ("scored", 0.0), ended
    assert "nothing was committed" in ended.metadata["verifier_output"]["reward"], ended.metadata
    assert f"more than its limit of {LIMIT_MB} MB" in ended.metadata["verifier_output"]["reward"], ended.metadata
