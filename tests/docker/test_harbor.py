"""Harbor tasks served by corral, played over the wire: `corral check --oracle --null` trusts the
fixture corpus; the agent's tools work in the task's container as its user, even without
python3; what the agent plants where the tests and the verdict go changes nothing; the
episode ends at the task's time budget and is still scored.

The tasks are tests/fixtures/harbor (see tests/unit/test_harbor_tasks.py for what each is).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import FIXTURES, serving
from tests.docker.conftest import containers
from tests.wire import called, opened, ws

pytestmark = pytest.mark.docker

HARBOR = FIXTURES / "harbor"
SERVED = [
    "c-build",
    "csv-stats",
    "git-repair",
    "legacy-wordcount",
    "multi-step",
    "shell-only",
    "two-scores",
    "yaml-config",
]
# Everything an agent could leave for the verdict: a test.sh and a conftest.py that pass, reward
# files saying 1, and a process of its own that keeps writing them (it outlives the bash call).
PLANT = """
mkdir -p /tests /logs/verifier
printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh
cat > /tests/conftest.py <<'PY'
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    (yield).get_result().outcome = "passed"
PY
echo 1 > /logs/verifier/reward.txt; echo '{"reward": 1}' > /logs/verifier/reward.json
setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.01; done' </dev/null >/dev/null 2>&1 &
echo planted
"""


@pytest.fixture(scope="module")
def harbor(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(HARBOR, sandbox="docker", max_concurrent_envs=8)


@pytest.fixture(scope="module")
def short_budgets(docker_engine, tmp_path_factory) -> Iterator[EmbeddedServer]:
    """The fixture tasks with an agent's time budget of 4 s ([agent] timeout_sec); the same images."""
    root = Path(shutil.copytree(HARBOR, tmp_path_factory.mktemp("budget") / "tasks"))
    for toml in root.glob("*/task.toml"):
        toml.write_text(re.sub(r"(\[agent\]\ntimeout_sec = )[\d.]+", r"\g<1>4.0", toml.read_text()))
    legacy = root / "legacy-wordcount" / "task.yaml"
    legacy.write_text(legacy.read_text().replace("max_agent_timeout_sec: 300", "max_agent_timeout_sec: 4"))
    yield from serving(root, sandbox="docker", max_concurrent_envs=8)


@pytest.mark.timing
def test_check_with_the_oracle_and_the_null_agent_trusts_every_fixture_task(docker_engine):
    result = CliRunner().invoke(app, ["check", str(HARBOR), "--sandbox", "docker", "--oracle", "--null"])

    assert result.exit_code == 0, result.output
    assert "harbor-fixtures: 8 Harbor tasks" in result.output
    assert "oracle: 7 of 7 task(s) score 1 with their solution" in result.output
    assert "no solution/ (not played): shell-only" in result.output
    assert "null: 8 of 8 task(s) score 0 when the agent does nothing" in result.output
    assert "harbor/needs-network: it asks for a network" in result.output
    assert "harbor/two-containers: it runs several containers" in result.output
    assert "python:3.12-slim -> corral-env/base-shared:" in result.output


def test_check_flags_a_task_whose_solution_fails_and_one_that_passes_untouched(docker_engine, tmp_path: Path):
    root = tmp_path / "tasks"
    shutil.copytree(HARBOR / "_images", root / "_images")
    shutil.copy(HARBOR / "bundle.toml", root / "bundle.toml")
    (root / "bundle.toml").write_text(
        (HARBOR / "bundle.toml").read_text().replace('[splits]\neval = ["csv-stats", "two-scores"]\n', "")
    )
    for name in ("broken-solution", "always-passes"):
        shutil.copytree(HARBOR / "csv-stats", root / name)
    (root / "broken-solution" / "solution" / "solve.sh").write_text("#!/bin/bash\necho '{}' > /app/totals.json\n")
    (root / "always-passes" / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")

    result = CliRunner().invoke(app, ["check", str(root), "--sandbox", "docker", "--oracle", "--null"])

    assert result.exit_code == 1, result.output
    assert "FLAGGED broken-solution: scored 0.0; the tests said:" in result.output
    assert "AssertionError" in result.output  # pytest's own words, from the tests' output
    assert "FLAGGED always-passes: scored 1.0 without the agent doing anything" in result.output


@pytest.mark.parametrize("task_id", SERVED)
def test_what_the_agent_plants_for_the_tests_and_the_verdict_changes_nothing(harbor, task_id):
    with ws(harbor) as socket:
        opened(socket, task_id=task_id)
        planted = called(socket, "bash", command=PLANT)
        ended = called(socket, "end_turn", response="done")

    if task_id != "shell-only":  # its agent is not root: it cannot even make /tests
        assert planted.result.endswith("planted\n[exit status 0]"), planted.result
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata
    assert "[verifier" in ended.metadata["verifier_output"]["reward"]


def test_every_task_ends_at_its_time_budget_and_is_still_scored(short_budgets):
    def sleep_past_the_budget(task_id: str, solve: str | None = None):
        with ws(short_budgets) as socket:
            opened(socket, task_id=task_id)
            if solve:
                assert called(socket, "bash", command=solve).error is None
            return called(socket, "bash", command="sleep 60", timeout_s=120)

    with ThreadPoolExecutor(len(SERVED) + 1) as threads:
        idle = dict(zip(SERVED, threads.map(sleep_past_the_budget, SERVED), strict=True))
        solved = threads.submit(
            sleep_past_the_budget, "legacy-wordcount", "wc -w < /app/input.txt > /app/count.txt"
        ).result()

    for task_id, ended in idle.items():
        assert (ended.done, ended.status, ended.reward) == (True, "scored", 0.0), (task_id, ended)
        assert "time budget of 4s ran out" in ended.result, (task_id, ended.result)
    assert (solved.status, solved.reward) == ("scored", 1.0), solved


def test_the_tools_work_in_an_image_without_python_as_its_non_root_user(harbor):
    with ws(harbor) as socket:
        opened(socket, task_id="shell-only")
        who = called(socket, "bash", command="id -un; pwd; command -v python3 || echo 'no python3'")
        wrote = called(socket, "write_file", path="sorted.txt", content="apple\nfig\nkiwi\npaer\n")
        fixed = called(socket, "replace_in_file", path="sorted.txt", old="paer", new="pear")
        missing = called(socket, "replace_in_file", path="sorted.txt", old="plum", new="prune")
        read = called(socket, "read_file", path="/home/worker/sorted.txt")
        refused = called(socket, "write_file", path="/etc/motd", content="mine")
        ended = called(socket, "end_turn", response="sorted")

    assert who.result == "worker\n/home/worker\nno python3\n[exit status 0]"
    assert (wrote.result, fixed.result) == ("wrote sorted.txt (20 characters)", "replaced 1 occurrence in sorted.txt")
    assert missing.error.message == "the old text does not occur in sorted.txt; give a piece that occurs exactly once"
    assert read.result == "apple\nfig\nkiwi\npear\n"
    assert "Permission denied" in refused.error.message
    assert (ended.status, ended.reward) == ("scored", 1.0)


def test_bash_returns_when_its_command_does_and_stops_everything_it_started_at_its_timeout(harbor):
    with ws(harbor) as socket:
        opened(socket, task_id="csv-stats")
        background = called(socket, "bash", command="sleep 300 >/dev/null 2>&1 & echo started; exit 3")
        timed_out = called(socket, "bash", command="sleep 301 & sleep 302; echo never", timeout_s=1)
        left = called(socket, "bash", command="cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        flood = called(socket, "bash", command="seq 1 200000")

    assert background.result == "started\n[exit status 3]"
    # (bash may yet say "Killed" of its child, in the moment before the kill reaches it)
    assert "[timed out after 1s: the command and everything it started were stopped" in timed_out.result
    assert "never" not in timed_out.result
    assert "sleep 300" in left.result and "sleep 301" not in left.result and "sleep 302" not in left.result
    head, _, tail = re.split(r"\n(\[output cut: [\d,]+ bytes of 1,288,895 left out[^\]]*\])\n", flood.result)
    assert head.startswith("1\n2\n3\n") and tail.endswith("199999\n200000\n[exit status 0]")


# The command reads the wrapper's nonce from its parent's command line and prints a pid line
# of its own naming a decoy, as the wrapper would (issue 38: the kill then missed the command).
FORGES_ITS_PID = (
    "mapfile -d '' a < /proc/$PPID/cmdline; sleep 305 & printf '\\n%s pid %s\\n' \"${a[3]}\" $!; sleep 303 & sleep 304"
)


def test_nothing_the_command_prints_steers_what_its_timeout_kills(harbor):
    with ws(harbor) as socket:
        opened(socket, task_id="csv-stats")
        timed_out = called(socket, "bash", command=FORGES_ITS_PID, timeout_s=2)
        left = called(socket, "bash", command="cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")

    assert "[timed out after 2s: the command and everything it started were stopped" in timed_out.result
    assert "sleep 303" not in left.result and "sleep 304" not in left.result, left.result


def test_the_task_container_is_hardened_even_when_its_user_is_root(harbor, docker_engine):
    with ws(harbor) as socket:
        episode = opened(socket, task_id="csv-stats").episode_id
        seen = called(
            socket,
            "bash",
            command="id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /sys/class/net; echo $SALES",
        )  # [environment] env
        (container,) = containers(docker_engine, corral_episode=episode)
        host = docker_engine.api.inspect_container(container["Id"])["HostConfig"]

    assert seen.result == "0\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nlo\n/app/sales.csv\n[exit status 0]"
    assert (host["CapDrop"], host["SecurityOpt"], host["NetworkMode"]) == (["ALL"], ["no-new-privileges"], "none")
    assert (host["Memory"], host["NanoCpus"]) == (1024 * 2**20, 10**9)  # csv-stats' task.toml


def test_a_reward_json_gives_two_scores_and_the_bundles_reward_picks_one(harbor):
    def play(script: str):
        with ws(harbor) as socket:
            opened(socket, task_id="two-scores")
            called(socket, "write_file", path="/app/fizzbuzz.sh", content=script)
            called(socket, "bash", command="chmod +x /app/fizzbuzz.sh")
            return called(socket, "end_turn", response="done")

    numbers = play("#!/bin/sh\nseq 1 30\n")  # right on the 16 lines that are plain numbers
    solved = play('#!/bin/sh\nseq 1 30 | awk \'{print $1%15==0?"FizzBuzz":$1%3==0?"Fizz":$1%5==0?"Buzz":$1}\'\n')

    assert (numbers.scores, numbers.reward) == ({"reward": 0.0, "lines": pytest.approx(16 / 30)}, 0.0)
    assert (solved.scores, solved.reward) == ({"reward": 1.0, "lines": 1.0}, 1.0)
    assert '"lines": 1.0' in solved.metadata["verifier_output"]["reward"]


def test_an_agent_that_ends_its_containers_first_process_scores_0_not_unscored(harbor):
    # The idle shell under docker's init answers `corral-warm` pings (split here, so this command does not match).
    kill_the_keeper = (
        "for p in /proc/[0-9]*; do grep -qs corral-''warm $p/cmdline && kill -9 ${p#/proc/}; done; sleep 5"
    )
    with ws(harbor) as socket:
        opened(socket, task_id="csv-stats")
        called(socket, "bash", command=kill_the_keeper)
        ended = called(socket, "end_turn", response="done")

    assert (ended.done, ended.reward) == (True, 0.0), ended
    assert ended.status in ("scored", "failed"), ended  # never unscored: the agent did it


@pytest.mark.parametrize("sabotage", ["rm -rf /tests && touch /tests", "rm -f /bin/sh /usr/bin/sh"])
def test_an_agent_that_breaks_what_its_tests_need_scores_0_not_unscored(harbor, sabotage):
    with ws(harbor) as socket:
        opened(socket, task_id="two-scores")
        called(socket, "bash", command=sabotage)
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended
    said = ended.metadata["verifier_output"]["reward"]  # why, where a user debugging the 0 looks
    assert "not a directory" in said or "/bin/sh failed" in said, said
