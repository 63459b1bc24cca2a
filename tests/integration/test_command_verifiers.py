"""Command verifiers: a task's hidden tests run on what the agent left after its last turn.

Played through the public client against a served bundle (local sandbox): shellfix's
reference fixes score 1 and its unfixed repositories 0; test files the agent forges do not
change the verdict; a hanging command stops at its per-call timeout; and a command verifier
of a small bundle written here scores 0 when it times out, beside a Python verifier.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from corral.client import Bundle
from tests.conftest import BUNDLES, processes_running, serving, wait_until_none
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
SHELLFIX = BUNDLES / "shellfix"


def solution(task_id: str) -> dict[str, str]:
    """The reference fix: replace_in_file's arguments."""
    return json.loads((SHELLFIX / "solutions" / f"{task_id}.json").read_text())


@pytest.fixture(scope="module")
def shellfix() -> Iterator[Bundle]:
    # Room for the sessions of environments that `play` dropped and that are still closing.
    for server in serving(SHELLFIX, max_concurrent_envs=16):
        with Bundle(server.url, split="all") as bundle:
            yield bundle


def play(bundle: Bundle, task_id: str, *edits: tuple[str, dict]) -> float | None:
    """Reset `task_id`, call each (tool, arguments) in turn, and return the episode's reward."""
    environment = bundle.factory()
    row = next(row for row in bundle.dataset if row["task_id"] == task_id)
    environment.reset(**row)
    for name, arguments in edits:
        answer = getattr(environment, name)(**arguments)
        assert not answer.startswith("replace_in_file failed"), answer
    return environment.get_reward()


def test_every_reference_fix_scores_1_and_every_unfixed_repository_0(shellfix):
    task_ids = [row["task_id"] for row in shellfix.dataset]
    assert len(task_ids) >= 12

    # Four sessions at once: the episodes wait on process starts more than they compute.
    with ThreadPoolExecutor(4) as pool:
        fixed_runs = pool.map(lambda task_id: play(shellfix, task_id, ("replace_in_file", solution(task_id))), task_ids)
        unfixed_runs = pool.map(lambda task_id: play(shellfix, task_id), task_ids)
        fixed, unfixed = dict(zip(task_ids, fixed_runs)), dict(zip(task_ids, unfixed_runs))

    assert fixed == dict.fromkeys(task_ids, 1.0)
    assert unfixed == dict.fromkeys(task_ids, 0.0)


# What an agent might leave behind to pass without fixing anything: tests of its own where
# test runners look, a unittest that always passes, a startup hook, and the runner's own name.
FORGERIES = {
    "tests/test_paginate.py": "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n",
    "test_paginate.py": "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n",
    "run_tests.py": "import sys\nsys.exit(0)\n",
    "unittest.py": "import sys\nsys.exit(0)\n",
    "sitecustomize.py": "import os\nos._exit(0)\n",
}


def test_tests_the_agent_writes_do_not_change_the_verdict(shellfix):
    forge = [("write_file", {"path": path, "content": text}) for path, text in FORGERIES.items()]

    unfixed = play(shellfix, "shellfix-paginate", *forge)
    fixed = play(shellfix, "shellfix-paginate", *forge, ("replace_in_file", solution("shellfix-paginate")))

    assert (unfixed, fixed) == (0.0, 1.0)


def test_code_that_exits_early_fails_the_tests(shellfix):
    exits_on_import = {"path": "paginate.py", "content": "import sys\nsys.exit(0)\n"}

    assert play(shellfix, "shellfix-paginate", ("write_file", exits_on_import)) == 0.0


def test_the_final_observation_shows_the_end_of_the_tests_output(shellfix):
    with ws(shellfix) as socket:
        opened(socket, task_id="shellfix-median")
        ended = called(socket, "end_turn", response="done")

    assert ended.done is True and ended.reward == 0.0
    shown = ended.metadata["verifier_output"]["tests"]
    assert "FAIL: test_even_count_takes_the_mean_of_the_middle_two" in shown
    assert shown.endswith("[verifier tests: exit status 1; scored 0]")
    assert len(shown) <= 2000


@pytest.fixture
def environment(shellfix):
    """A shellfix episode, open on the first task; ended (its sandbox closed) after the test."""
    environment = shellfix.factory()
    environment.reset(**shellfix.dataset[0])
    yield environment
    environment.get_reward()


def unique_sleeps() -> tuple[str, str]:
    """Two `sleep` lengths no other process on the machine uses (another test run's included),
    so that /proc tells whether either outlived the command that started it."""
    stamp = uuid.uuid4().int % 10**8
    return f"4100.{stamp:08d}", f"4200.{stamp:08d}"


def test_a_hanging_command_stops_at_its_timeout_and_the_episode_goes_on(environment):
    background, foreground = unique_sleeps()
    hung = environment.bash(command=f"echo started; sleep {background} & sleep {foreground}", timeout_s=1)
    # Stopped, the sleep it left in the background too: the whole process group is killed.
    assert wait_until_none(lambda: processes_running(background) + processes_running(foreground), 2) == []
    after = environment.bash(command="echo still here")

    assert hung.startswith("started\n")
    assert "[timed out after 1s: the command and everything it started were stopped" in hung
    assert after == "still here\n[exit status 0]"


def test_long_output_is_cut_with_a_note(environment):
    answer = environment.bash(command="seq 1 100000")

    assert answer.startswith("1\n2\n3\n") and answer.endswith("99999\n100000\n[exit status 0]")
    assert "[output cut: " in answer and len(answer) < 9000


# A bundle of one env (the agent says a word) with two verifiers: a Python one and a command.
SAY_ENV = '''\
from corral.env import Env, agent, tool


class Say(Env):
    def reset(self, task: dict) -> None:
        self.word = ""

    @tool
    def say(self, word: str) -> str:
        """Say a word; it is written to said.txt.

        Args:
            word: the word.
        """
        self.word = word
        with agent.files(), open("said.txt", "w") as said:  # the agent's file, in the agent's folder
            said.write(word)
        return "ok"

    def report(self) -> dict:
        return {"word": self.word}
'''


def write_say_bundle(root: Path, command_verifier: str, then: str | None = None) -> Path:
    """The say bundle, scored by `heard` (Python), `file` (the command verifier given) and, when
    given, `then`: a command verifier that runs after `file`."""
    bundle = root / "say"
    verifiers = 'heard = "heard", file = "file"' + (', then = "then"' if then else "")
    files = {
        "bundle.toml": f'name = "say"\n[defaults]\nenv = "say"\nverifiers = {{ {verifiers} }}\n'
        '[serve]\nreward = "file"\n',
        "envs/say/env.toml": 'entry = "env:Say"\n',
        "envs/say/env.py": SAY_ENV,
        "verifiers/heard.py": "def verify(task, report):\n    return float(report['word'] == task['args']['want'])\n",
        "verifiers/file.toml": command_verifier,
        "answers/apple/expected.txt": "apple",
        "tasks.jsonl": json.dumps({"id": "apple", "args": {"want": "apple"}, "prompt": "Say apple."}) + "\n",
    }
    if then:
        files["verifiers/then.toml"] = then
    for relative, text in files.items():
        (bundle / relative).parent.mkdir(parents=True, exist_ok=True)
        (bundle / relative).write_text(text)
    return bundle


COMPARES_THE_FILE = """\
command = ["python3", "-c", "import sys; sys.exit(open('said.txt').read() != open(sys.argv[1]).read())", "{files}/expected.txt"]
files = "answers/{task_id}"
timeout_s = 30
"""


def test_command_and_python_verifiers_score_the_same_episode(tmp_path, serve):
    server = serve(write_say_bundle(tmp_path, COMPARES_THE_FILE), sandbox="local")
    with Bundle(server.url) as bundle:
        environment = bundle.factory()
        with ws(server) as socket:
            opened(socket, task_id="apple")
            called(socket, "say", word="apple")
            right = called(socket, "end_turn", response="")
            opened(socket, task_id="apple")
            called(socket, "say", word="pear")
            wrong = called(socket, "end_turn", response="")

        assert (right.reward, right.scores) == (1.0, {"heard": 1.0, "file": 1.0})
        assert (wrong.reward, wrong.scores) == (0.0, {"heard": 0.0, "file": 0.0})
        environment.reset(**bundle.dataset[0])
        environment.say(word="apple")
        assert environment.get_reward() == 1.0


def test_a_command_verifier_that_times_out_scores_0_and_leaves_no_process(tmp_path, serve):
    background, foreground = unique_sleeps()
    # A shell and two sleeps, none holding the output open once the shell is gone: only killing
    # the whole process group at the deadline ends them all.
    hangs = (
        f'command = ["sh", "-c", "sleep {background} >/dev/null 2>&1 & sleep {foreground} >/dev/null 2>&1"]\n'
        "timeout_s = 0.5\n"
    )
    # The next command verifier looks for them (the episode's sandbox, closed once every verifier
    # has run, would kill them anyway) and passes when neither is running; `[.]` for the dot
    # keeps grep from matching its own command line.
    stamp = background.split(".")[1]  # both sleeps' lengths end in it
    then = f'command = ["sh", "-c", "! grep -qs \'[.]{stamp}\' /proc/[0-9]*/cmdline"]\ntimeout_s = 10\n'
    server = serve(write_say_bundle(tmp_path, hangs, then=then), sandbox="local")
    with ws(server) as socket:
        opened(socket, task_id="apple")
        called(socket, "say", word="apple")
        ended = called(socket, "end_turn", response="")

    assert ended.reward == 0.0
    assert ended.scores == {"heard": 1.0, "file": 0.0, "then": 1.0}
    assert ended.metadata["verifier_output"]["file"] == "[verifier file: timed out after 0.5s; scored 0]"
    assert processes_running(background) == processes_running(foreground) == []
