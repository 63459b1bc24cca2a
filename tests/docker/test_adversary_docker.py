"""Attacks a fresh adversary tried on the docker sandbox, beyond tests/attacks.py and the Harbor
plants: each must end the episode scored at the failure score (never null, never above it).

- A lone surrogate in a tool's argument (JSON's `\\udc80`, as any client that writes JSON with
  `ensure_ascii` sends it), which comes back in the tool's answer.
- shellfix's reference fix beside a folder the agent made mode 000 (the copy of its files for
  verifying leaves out what it cannot read: the fix still scores 1).
- A Harbor task whose agent is not root (csv-stats as `worker`, tests/docker/test_harbor_attacks.py):
  its answer file left as a link to where the task's own tests, with their expected answer,
  will be once the agent's turn is over; an answer that hangs the tests (a fifo, a link to
  stdin); pytest configuration left in the tests' working folder.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client.protocol import CallToolObservation
from corral.server.embedded import EmbeddedServer
from tests.attacks import bash, play
from tests.conftest import BUNDLES, serving
from tests.docker.test_harbor_attacks import TASK as WORKER_TASK
from tests.docker.test_harbor_attacks import play as play_worker
from tests.docker.test_harbor_attacks import worker_tasks  # noqa: F401 - the fixture, shared
from tests.integration.test_adversary import ODD_FILES, raw_call
from tests.wire import called, observed, opened, send, ws

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "shellfix", sandbox="docker")


@pytest.fixture(scope="module")
def harbor_worker(docker_engine, worker_tasks) -> Iterator[EmbeddedServer]:  # noqa: F811
    yield from serving(worker_tasks, sandbox="docker", max_concurrent_envs=4)


def test_a_lone_surrogate_in_a_shellfix_argument_neither_breaks_the_session_nor_dodges_the_0(shellfix_docker):
    with ws(shellfix_docker) as socket:
        opened(socket, task_id="shellfix-batching")
        observed(send(socket, raw_call("write_file", path="\udc80.py", content="x = 1\n")), CallToolObservation)
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0)


def test_the_fix_beside_a_folder_nobody_may_read_still_scores_1(shellfix_docker):
    ended = play(shellfix_docker, [bash(ODD_FILES["a folder nobody may read"])], fixed=True)

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata
    assert "left out" in str(ended.metadata["verifier_output"]), ended.metadata


def test_a_lone_surrogate_in_a_harbor_command_neither_breaks_the_session_nor_dodges_the_0(harbor_worker):
    with ws(harbor_worker) as socket:
        opened(socket, task_id=WORKER_TASK)
        observed(send(socket, raw_call("bash", command="echo '\udc80'; ls /app/\udc80")), CallToolObservation)
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0)


@pytest.fixture(scope="module")
def harbor_worker_5s(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:  # noqa: F811
    """The same task, whose tests get 5 s ([verifier] timeout_sec)."""
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-5s") / "tasks"))
    toml = root / WORKER_TASK / "task.toml"
    toml.write_text(re.sub(r"(\[verifier\]\ntimeout_sec = )[\d.]+", r"\g<1>5.0", toml.read_text()))
    yield from serving(root, sandbox="docker", max_concurrent_envs=4)


@pytest.mark.parametrize("answer", ["a fifo nobody writes", "a link to the tests' stdin"])
def test_an_answer_that_hangs_the_tests_scores_0_not_unscored(harbor_worker_5s, answer):
    made = {"a fifo nobody writes": "mkfifo /app/totals.json",
            "a link to the tests' stdin": "ln -s /proc/self/fd/0 /app/totals.json"}[answer]
    ended = play_worker(harbor_worker_5s, made)

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)


EXIT_0 = "import posix; posix._exit(0)"
PYTEST_PLANTS = {  # where pytest, run from /app on /tests/test_totals.py, might look for configuration
    "a conftest.py in the working folder": f"printf '{EXIT_0}\\n' > /app/conftest.py",
    "a pytest.ini in the working folder": "printf '[pytest]\\naddopts = -p no:python --co\\n' > /app/pytest.ini",
    "a pyproject.toml in the working folder": (
        "printf '[tool.pytest.ini_options]\\naddopts = \"--co\"\\n' > /app/pyproject.toml"),
    "a plugin package in the working folder": (
        f"mkdir -p /app/_pytest_plugin && printf '{EXIT_0}\\n' > /app/_pytest_plugin/__init__.py && "
        "printf '[pytest]\\nrequired_plugins = _pytest_plugin\\naddopts = -p _pytest_plugin\\n' > /app/tox.ini"),
}


@pytest.mark.parametrize("plant", PYTEST_PLANTS)
def test_pytest_configuration_the_agent_leaves_in_the_working_folder_scores_0(harbor_worker, plant):
    ended = play_worker(harbor_worker, PYTEST_PLANTS[plant])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]
