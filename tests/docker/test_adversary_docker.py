"""Attacks a fresh adversary tried on the docker sandbox, beyond tests/attacks.py and the Harbor
plants: each must end the episode scored at the failure score (never null, never above it).

- A lone surrogate in a tool's argument (JSON's `\\udc80`, as any client that writes JSON with
  `ensure_ascii` sends it), which comes back in the tool's answer.
- shellfix's reference fix beside a folder the agent made mode 000 (the copy of its files for
  verifying leaves out what it cannot read: the fix still scores 1).
- A Harbor task whose agent is not root (csv-stats as `worker`, tests/docker/test_harbor_attacks.py):
  its answer file left as a link to where the task's own tests, with their expected answer,
  will be once the agent's turn is over (absolute, relative, a chain of links, a linked folder,
  through /proc/self/root or /proc/self/cwd, /dev/fd), or to the verifier's results folder or
  HOME; an agent that is root making the results folder a link to the tests, or /logs a link
  to a folder of its own that its answer links into; an answer that hangs the tests (a fifo, a link to stdin); pytest configuration left in
  the tests' working folder. The solution beside harmless links still scores 1.
- The env signalled (STOP, KILL, INT, TERM) by a process the agent detached, from the moment
  its call is answered through the end of the turn and the verification, in shellfix's
  container (the env is PID 1 there: only INT reaches it, and ends it) and in a Harbor task's
  (the env is docker's init's child, of the agent's own user).
- The protocol's stream (the channel's socket, or the attach stream's pipes) opened under
  /proc through the env: none can be.
- Empty files past what a scratch tmpfs holds (its size counts no inodes): refused.
- An agent that is root leaving its verdict where the tests run: reward files written ahead,
  /tests made with a passing test, startup files in root's HOME (fifth pass: held).
- 20 MB written on docker's init's stdout in a Harbor task's container: the engine keeps no
  log of it on this machine's disk. (A Harbor task's container has no env process: its
  tools run through the engine's exec, its stdio carries only the warm pool's pings.)
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.protocol.frames import CallToolObservation
from corral.server.serving.embedded import EmbeddedServer
from tests.attacks import HOUND, PROTOCOL_OPENER, SIGNALS, bash, play
from tests.conftest import BUNDLES, serving
from tests.docker.test_harbor import harbor  # noqa: F401 - the fixture, shared
from tests.docker.test_harbor_attacks import SOLVE, worker_tasks  # noqa: F401 - the fixture, shared
from tests.docker.test_harbor_attacks import TASK as WORKER_TASK
from tests.docker.test_harbor_attacks import play as play_worker
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


LINKS = {  # each leaves /app/totals.json resolving, when the tests read it, into what the verifier brought in
    "absolute": "ln -s /tests/data/expected.json /app/totals.json",
    "relative": "ln -s ../tests/data/expected.json /app/totals.json",
    "a chain through /tmp": "ln -s ../tests/data/expected.json /tmp/e && ln -s ../tmp/e /app/totals.json",
    "a linked folder": "ln -s /tests/data /app/d && ln -s d/expected.json /app/totals.json",
    "a linked root": "ln -s / /tmp/root && ln -s /tmp/root/./tests//data/expected.json /app/totals.json",
    "through /proc/self/root": "ln -s /proc/self/root/tests/data/expected.json /app/totals.json",
    "through /proc/self/cwd": "ln -s /proc/self/cwd/../tests/data/expected.json /app/totals.json",
    "through /dev/fd": "ln -s /dev/fd/3 /app/totals.json",
    "into the results folder": "ln -s /logs/verifier/reward.txt /app/totals.json",
    "into the verifier's HOME": "ln -s /corral-verifier-home/x /app/totals.json",
    "a loop": "ln -s /app/loop2 /app/loop1 && ln -s /app/loop1 /app/loop2 && ln -s loop1 /app/totals.json",
    "through a name that is not UTF-8": (
        "mkdir $'/app/\\xc3(' && ln -s /tests/data/expected.json $'/app/\\xc3(/e' && ln -s $'\\xc3(/e' /app/totals.json"
    ),
}
HARMLESS_LINKS = (
    "ln -s /etc/hostname /app/host && ln -s . /app/self && ln -s /nowhere/at/all /app/dangling && "
    "ln -s ../app/sales.csv /tmp/sales && ln -s /usr/bin /app/bin && "
    "mkdir $'/app/\\xc3(' && ln -s /etc/hostname $'/app/\\xc3(/\\xff'"
)


@pytest.mark.parametrize("link", LINKS)
def test_an_answer_linked_into_what_the_verifier_brings_in_scores_0(harbor_worker, link):
    ended = play_worker(harbor_worker, LINKS[link] + " && ls -l /app/totals.json")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]
    assert "links the agent left" in ended.metadata["verifier_output"]["reward"]


ROOT_LINKS = {  # an agent that is root may make the folders the verifier mounts links of its own
    "the results folder a link to the tests": "mkdir -p /logs && rm -rf /logs/verifier && ln -s /tests /logs/verifier",
    "the answer into a results folder moved by a link": (
        "rm -rf /logs && mkdir -p /app/l && ln -s /app/l /logs && ln -s /app/l/verifier/reward.txt /app/totals.json"
    ),
}


# Held in the fifth pass: each folder is mounted fresh (nocopy) over what the agent left there.
ROOT_PLANTS = {
    "reward files written ahead": (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
    ),
    "the tests' folder made with a passing test": (
        "mkdir -p /tests && printf 'def test_ok():\\n    pass\\n' > /tests/test_totals.py && chmod -R 555 /tests"
    ),
    "startup files in root's HOME": (
        "d=/root/.local/lib/python3.11/site-packages && mkdir -p $d && echo 'import posix; posix._exit(0)' > $d/x.pth"
        " && printf '[pytest]\\naddopts = --co\\n' > /root/pytest.ini"
    ),
}


@pytest.mark.parametrize("plant", ROOT_PLANTS)
def test_a_root_agent_s_verdict_left_where_the_tests_run_scores_0(harbor, plant):  # noqa: F811
    with ws(harbor) as socket:
        opened(socket, task_id="csv-stats")
        assert called(socket, "bash", command=ROOT_PLANTS[plant]).result.endswith("[exit status 0]")
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata


@pytest.mark.parametrize("link", ROOT_LINKS)
def test_a_root_agent_s_links_on_the_verifier_s_folders_score_0(harbor, link):  # noqa: F811
    with ws(harbor) as socket:
        opened(socket, task_id="csv-stats")
        assert called(socket, "bash", command=ROOT_LINKS[link]).result.endswith("[exit status 0]")
        ended = called(socket, "end_turn", response="done")

    # Named as a link, or the results folder's volume mounted where the link leads, over the tests: a 0 either way.
    assert (ended.status, ended.reward) == ("scored", 0.0), ended


def test_the_solution_beside_harmless_links_still_scores_1(harbor_worker):
    ended = play_worker(harbor_worker, SOLVE, HARMLESS_LINKS)

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]


@pytest.fixture(scope="module")
def harbor_worker_5s(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:  # noqa: F811
    """The same task, whose tests get 5 s ([verifier] timeout_sec)."""
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-5s") / "tasks"))
    toml = root / WORKER_TASK / "task.toml"
    toml.write_text(re.sub(r"(\[verifier\]\ntimeout_sec = )[\d.]+", r"\g<1>5.0", toml.read_text()))
    yield from serving(root, sandbox="docker", max_concurrent_envs=4)


@pytest.mark.parametrize("answer", ["a fifo nobody writes", "a link to the tests' stdin"])
def test_an_answer_that_hangs_the_tests_scores_0_not_unscored(harbor_worker_5s, answer):
    made = {
        "a fifo nobody writes": "mkfifo /app/totals.json",
        "a link to the tests' stdin": "ln -s /proc/self/fd/0 /app/totals.json",
    }[answer]
    ended = play_worker(harbor_worker_5s, made)

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)


EXIT_0 = "import posix; posix._exit(0)"
PYTEST_PLANTS = {  # where pytest, run from /app on /tests/test_totals.py, might look for configuration
    "a conftest.py in the working folder": f"printf '{EXIT_0}\\n' > /app/conftest.py",
    "a pytest.ini in the working folder": "printf '[pytest]\\naddopts = -p no:python --co\\n' > /app/pytest.ini",
    "a pyproject.toml in the working folder": (
        "printf '[tool.pytest.ini_options]\\naddopts = \"--co\"\\n' > /app/pyproject.toml"
    ),
    "a plugin package in the working folder": (
        f"mkdir -p /app/_pytest_plugin && printf '{EXIT_0}\\n' > /app/_pytest_plugin/__init__.py && "
        "printf '[pytest]\\nrequired_plugins = _pytest_plugin\\naddopts = -p _pytest_plugin\\n' > /app/tox.ini"
    ),
}


@pytest.mark.parametrize("plant", PYTEST_PLANTS)
def test_pytest_configuration_the_agent_leaves_in_the_working_folder_scores_0(harbor_worker, plant):
    ended = play_worker(harbor_worker, PYTEST_PLANTS[plant])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]


@pytest.mark.parametrize("signal", SIGNALS)
def test_the_env_signalled_after_the_agent_s_call_ends_at_the_failure_score(shellfix_docker, signal):
    ended = play(shellfix_docker, [bash(HOUND.format(signal=signal), "started\n[exit status 0]")])

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)


@pytest.mark.parametrize("signal", SIGNALS)
def test_a_harbor_env_signalled_after_the_agent_s_call_ends_at_the_failure_score(harbor_worker, signal):
    ended = play_worker(harbor_worker, HOUND.format(signal=signal))

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)


def test_no_process_in_the_container_lets_the_agent_open_the_protocol_s_stream(shellfix_docker):
    ended = play(shellfix_docker, [bash(PROTOCOL_OPENER, "opened []\n[exit status 0]")])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_empty_files_past_what_the_scratch_folder_holds_are_refused(shellfix_docker):
    # 64 MB hold 65,536 files and folders: each costs the kernel's memory, whatever its size.
    with ws(shellfix_docker) as socket:
        opened(socket, task_id="shellfix-batching")
        said = called(
            socket, "bash", command="mkdir many && cd many && seq 70000 | xargs touch 2>&1 | head -n 1", timeout_s=30
        )
        ended = called(socket, "end_turn", response="done")

    assert "No space left on device" in said.result, said.result
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_what_the_agent_writes_on_the_container_s_stdio_is_kept_nowhere(harbor_worker, docker_engine):
    # docker's init's stdout, a pipe of the agent's own user in a Harbor task's container: 20 MB.
    with ws(harbor_worker) as socket:
        opened(socket, task_id=WORKER_TASK)
        said = called(socket, "bash", command="timeout 20 head -c 20000000 /dev/zero > /proc/1/fd/1; cat /etc/hostname")
        log_path = docker_engine.containers.get(said.result.splitlines()[-2]).attrs["LogPath"]
        kept = os.path.getsize(log_path) if log_path else 0
        ended = called(socket, "end_turn", response="done")

    assert kept < 1 << 20, f"{kept} bytes kept in {log_path}"
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason
