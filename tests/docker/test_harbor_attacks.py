"""A Harbor task whose agent is not root: what the agent leaves where Python looks for code
does not run in its tests (a pristine verifier), and the reference solution, beside the same
plants, still scores 1.

The task is tests/fixtures/harbor/csv-stats made to run as a user of its own (`worker`, who
owns /app): its tests run `python3 -m pytest` from /app as the image's user, as many public
tasks' do, so an interpreter that honoured the agent's folders would run the agent's code
first. Each plant ends the tests' interpreter with status 0, which test.sh reads as a pass.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import FIXTURES, serving
from tests.wire import called, opened, ws

pytestmark = pytest.mark.docker

TASK = "csv-worker"
EXIT_0 = "import posix; posix._exit(0)"
SOLVE = (  # solution/solve.sh of csv-stats, as the agent would type it
    'python3 -c \'import csv, json\ntotals = {}\nfor row in csv.DictReader(open("/app/sales.csv")):\n'
    '    totals[row["region"]] = totals.get(row["region"], 0) + int(row["units"]) * float(row["unit_price"])\n'
    'json.dump({k: round(v, 2) for k, v in totals.items()}, open("/app/totals.json", "w"))\''
)
# -I: the agent's own interpreter must not trip over the plants already made.
USER_SITE = "d=$(python3 -I -c 'import site; print(site.getusersitepackages())') && mkdir -p $d"
PLANTS = {
    "a pytest.py in the tests' working folder": f"printf '{EXIT_0}\\n' > /app/pytest.py",
    "a .pth in the user's site folder": f"{USER_SITE} && printf '{EXIT_0}\\n' > $d/corral.pth",
    "a usercustomize in the user's site folder": f"{USER_SITE} && printf '{EXIT_0}\\n' > $d/usercustomize.py",
    "a sitecustomize in the working folder": f"printf '{EXIT_0}\\n' > /app/sitecustomize.py",
    "a stale bytecode cache of pytest in the working folder": (
        f"printf '{EXIT_0}\\n' > /app/pytest.py && python3 -I -c 'import py_compile; py_compile.compile(\"/app/pytest.py\")'"
        " && rm /app/pytest.py && mkdir -p /app/pytest && mv /app/__pycache__/pytest.*.pyc /app/pytest/__init__.pyc"
    ),
}


@pytest.fixture(scope="module")
def worker_tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("harbor-worker") / "tasks"
    root.mkdir()
    (root / "bundle.toml").write_text(
        'name = "harbor-worker"\n[base_images]\n"python:3.12-slim" = { build = "_images/shared" }\n'
    )
    shutil.copytree(FIXTURES / "harbor" / "_images", root / "_images")
    task = Path(shutil.copytree(FIXTURES / "harbor" / "csv-stats", root / TASK))
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim\nRUN useradd --create-home --uid 1001 worker\nWORKDIR /app\n"
        "COPY --chown=worker:worker sales.csv /app/sales.csv\nRUN chown worker:worker /app\nUSER worker\n"
    )
    return root


@pytest.fixture(scope="module")
def harbor_worker(docker_engine, worker_tasks) -> Iterator[EmbeddedServer]:
    yield from serving(worker_tasks, sandbox="docker", max_concurrent_envs=4)


def play(server: EmbeddedServer, *commands: str):
    with ws(server) as socket:
        opened(socket, task_id=TASK)
        for command in commands:
            said = called(socket, "bash", command=command)
            assert said.result.endswith("[exit status 0]"), said.result
        return called(socket, "end_turn", response="done")


@pytest.mark.parametrize("plant", PLANTS)
def test_code_the_agent_leaves_where_python_looks_does_not_run_in_its_tests(harbor_worker, plant):
    ended = play(harbor_worker, PLANTS[plant])
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]


def test_the_solution_beside_every_plant_still_scores_1(harbor_worker):
    ended = play(harbor_worker, SOLVE, *PLANTS.values())
    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]


def test_the_oracle_plays_a_task_whose_agent_is_not_root(harbor_worker, worker_tasks):
    """The agent's tools cannot write /solution for a user other than root: the oracle puts the
    solution where that user can, and the task scores 1 with it and 0 without."""
    result = CliRunner().invoke(app, ["check", str(worker_tasks), "--sandbox", "docker", "--oracle", "--null"])
    assert result.exit_code == 0, result.output
    assert "oracle: 1 of 1 task(s) score 1 with their solution" in result.output
    assert "null: 1 of 1 task(s) score 0 when the agent does nothing" in result.output


# The same task with tests a careful author wrote: they run as root and start the agent's own
# program as the agent's user (runuser), so that program cannot write the verdict.
RUNS_THE_AGENTS_PROGRAM = (
    "#!/bin/bash\npython3 -m pytest -q -p no:cacheprovider /tests/test_totals.py\n"
    "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    "runuser -u worker -- python3 /app/summarize.py || true\n"
)
FORGES_THE_VERDICT = (
    'printf \'import json, pathlib\\nfor path in ("/logs/verifier/reward.json", "/corral-verifier-home/forged"):\\n'
    '    try: pathlib.Path(path).write_text(json.dumps({"reward": 1}))\\n'
    '    except OSError as error: print("refused:", error)\\n\' > /app/summarize.py'
)


@pytest.fixture(scope="module")
def root_tests(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-root-tests") / "tasks"))
    task = root / TASK
    (task / "tests" / "test.sh").write_text(RUNS_THE_AGENTS_PROGRAM)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "root"\n'))
    yield from serving(root, sandbox="docker", max_concurrent_envs=2)


def test_tests_run_as_root_keep_the_agent_s_program_from_the_verdict(root_tests):
    ended = play(root_tests, FORGES_THE_VERDICT)
    output = "\n".join(ended.metadata["verifier_output"].values())
    assert (ended.status, ended.reward) == ("scored", 0.0), output
    assert output.count("refused: [Errno 13] Permission denied") == 2, output  # the verdict's folder and HOME


def test_tests_run_as_root_still_write_the_verdict_of_a_solution(root_tests):
    ended = play(root_tests, SOLVE, FORGES_THE_VERDICT)
    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]


# The same task, its image listing folders its agent can write in where its tests look for
# programs and modules, as an image that installed tools as that user does (its python3 is
# Debian's 3.11: tests/fixtures/harbor/_images/shared).
SITE = "/usr/local/lib/python3.11/dist-packages"
SEARCHED_BY_THE_TESTS = f"ENV PATH=/home/worker/.local/bin:$PATH PYTHONPATH=/app/lib\nRUN chown worker {SITE}\n"
SEARCH_PLANTS = {
    "a python3 on the image's PATH": (
        "mkdir -p ~/.local/bin && printf '#!/bin/sh\\nexit 0\\n' > ~/.local/bin/python3 && chmod 755 ~/.local/bin/python3"
    ),
    "a sitecustomize on the image's PYTHONPATH": f"mkdir -p /app/lib && printf '{EXIT_0}\\n' > /app/lib/sitecustomize.py",
}


@pytest.fixture(scope="module")
def searched_tasks(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-searched") / "tasks"))
    dockerfile = root / TASK / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("USER worker\n", SEARCHED_BY_THE_TESTS + "USER worker\n"))
    yield from serving(root, sandbox="docker", max_concurrent_envs=2)


@pytest.mark.parametrize("plant", SEARCH_PLANTS)
def test_a_program_the_agent_leaves_where_the_image_s_path_looks_does_not_run_in_its_tests(searched_tasks, plant):
    ended = play(searched_tasks, SEARCH_PLANTS[plant])
    output = ended.metadata["verifier_output"]["reward"]
    assert (ended.status, ended.reward) == ("scored", 0.0), output
    assert "left off the tests' PATH and PYTHONPATH" in output and "/home/worker/.local/bin" in output, output


def test_the_solution_beside_plants_on_the_image_s_path_still_scores_1(searched_tasks):
    ended = play(searched_tasks, SOLVE, *SEARCH_PLANTS.values())
    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]


def test_a_pth_the_agent_leaves_in_a_site_folder_of_the_tests_python_stops_the_tests(searched_tasks):
    ended = play(searched_tasks, SOLVE, f"printf '{EXIT_0}\\n' > {SITE}/corral.pth")
    output = ended.metadata["verifier_output"]["reward"]
    assert (ended.status, ended.reward) == ("scored", 0.0), output
    assert f"changed folders their Python imports from: {SITE}" in output, output


# The same task, its image naming a file in the agent's home in a variable pytest reads as it
# starts (issue 38: BASH_ENV, LD_LIBRARY_PATH; here its neighbour PYTEST_ADDOPTS).
STARTS_WITH_THE_AGENT_S_FILE = 'ENV PYTEST_ADDOPTS="-c /home/worker/pytest.ini"\n'
COLLECT_ONLY = "printf '[pytest]\\naddopts = --collect-only\\n' > ~/pytest.ini"


@pytest.fixture(scope="module")
def startup_tasks(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-startup") / "tasks"))
    dockerfile = root / TASK / "environment" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace("USER worker\n", STARTS_WITH_THE_AGENT_S_FILE + "USER worker\n")
    )
    yield from serving(root, sandbox="docker", max_concurrent_envs=2)


def test_a_start_up_variable_of_the_image_runs_nothing_of_the_agent_s_in_its_tests(startup_tasks):
    ended = play(startup_tasks, COLLECT_ONLY)
    output = ended.metadata["verifier_output"]["reward"]
    assert (ended.status, ended.reward) == ("scored", 0.0), output
    assert "set empty for the tests" in output and "PYTEST_ADDOPTS" in output, output


def test_the_solution_scores_1_where_the_image_sets_a_start_up_variable(startup_tasks):
    ended = play(startup_tasks, SOLVE, COLLECT_ONLY)
    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]


# The same task, its root tests comparing the agent's answer with a key only root can read (a
# 0600 file of the tests' user; issue 38 linked answer.txt to /root/answer-key.txt).
KEYED = "RUN mkdir -p /opt/grader && echo 42-secret > /opt/grader/key && chmod 600 /opt/grader/key\n"
COMPARES_WITH_THE_KEY = (
    '#!/bin/bash\nif [ "$(cat /app/answer.txt)" = "$(cat /opt/grader/key)" ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)


@pytest.fixture(scope="module")
def keyed_tasks(docker_engine, worker_tasks, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = Path(shutil.copytree(worker_tasks, tmp_path_factory.mktemp("harbor-keyed") / "tasks"))
    task = root / TASK
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("USER worker\n", KEYED + "USER worker\n"))
    (task / "tests" / "test.sh").write_text(COMPARES_WITH_THE_KEY)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "root"\n'))
    yield from serving(root, sandbox="docker", max_concurrent_envs=2)


def test_a_link_to_a_file_the_agent_cannot_read_stops_its_root_tests(keyed_tasks):
    ended = play(keyed_tasks, "ln -s /opt/grader/key /app/answer.txt")
    output = ended.metadata["verifier_output"]["reward"]
    assert (ended.status, ended.reward) == ("scored", 0.0), output
    assert "/app/answer.txt: leads where the agent's user cannot read" in output, output


def test_a_link_to_a_file_the_agent_can_read_is_read_by_its_tests(keyed_tasks):
    ended = play(keyed_tasks, "echo 42-secret > ~/mine.txt && ln -s ~/mine.txt /app/answer.txt")
    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata["verifier_output"]
