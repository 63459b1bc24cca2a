"""`corral check`: every problem of a bundle at once, each naming its file or task and the fix.

Each test writes a small valid bundle (one env built on `corral.env`, one verifier, two tasks,
one eval), breaks it, and checks it the way a bundle author does: with `corral check`, and
with `load_bundle` for the problems that need no env running.
"""

import json
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.formats import load_bundle

ROOT = Path(__file__).parents[2]

COUNTER_ENV = '''\
"""A running total the agent adds to."""

from corral.env import Env, tool


class Counter(Env):
    def reset(self, task: dict) -> None:
        self.total = task.get("start", 0)

    @tool
    def add(self, n: int) -> dict:
        """Add a number to the total.

        Args:
            n: the number to add.
        """
        self.total += n
        return {"total": self.total}

    def report(self) -> dict:
        return {"total": self.total}
'''

UNDOCUMENTED_ENV = """\
from corral.env import Env, tool


class Shouter(Env):
    @tool
    def shout(self, text: str) -> str:
        return text.upper()
"""

VERIFIER = """\
def verify(task: dict, report: dict) -> float:
    return 1.0 if report.get("total") == 10 else 0.0
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def add_env(bundle: Path, name: str, env_py: str, entry: str) -> None:
    write(bundle / "envs" / name / "env.toml", f'entry = "{entry}"\n')
    write(bundle / "envs" / name / "env.py", env_py)


def add_task_file(bundle: Path, task_id: str, **fields) -> None:
    """tasks/<id>.json; the id comes from the file name."""
    write(bundle / "tasks" / f"{task_id}.json", json.dumps({"prompt": "Reach 10.", **fields}))


def add_task_line(bundle: Path, line: str) -> None:
    with (bundle / "tasks.jsonl").open("a") as tasks:
        tasks.write(line + "\n")


def write_bundle(root: Path, bundle_toml: str = "") -> Path:
    """A clean bundle `tiny`: env counter (tool add), verifier total, tasks tiny-1 and tiny-2
    (one in tasks/, one in tasks.jsonl), eval train = [tiny-1]."""
    bundle = root / "tiny"
    write(
        bundle / "bundle.toml",
        bundle_toml
        or (
            'name = "tiny"\n'
            'description = "Add up to ten."\n'
            "[defaults]\n"
            'env = "counter"\n'
            'verifiers = { total = "total" }\n'
        ),
    )
    add_env(bundle, "counter", COUNTER_ENV, "env:Counter")
    write(bundle / "verifiers" / "total.py", VERIFIER)
    add_task_file(bundle, "tiny-1", args={"start": 3})
    add_task_line(bundle, json.dumps({"id": "tiny-2", "args": {"start": 7}, "prompt": "Reach 10."}))
    write(bundle / "evals" / "train.toml", 'tasks = ["tiny-1"]\n')
    return bundle


def corral_check(bundle: Path):
    """`corral check` on the local sandbox (tests/docker checks bundles on docker)."""
    return CliRunner().invoke(app, ["check", str(bundle), "--sandbox", "local"])


def problem_lines(output: str) -> list[str]:
    return [line.removeprefix("  - ") for line in output.splitlines() if line.startswith("  - ")]


@pytest.mark.bwrap
def test_a_clean_bundle_passes_with_a_one_line_summary(tmp_path):
    bundle = write_bundle(tmp_path)

    result = corral_check(bundle)

    assert result.exit_code == 0, result.output
    assert result.output == ("tiny: 2 tasks; splits all (2), train (1); 1 env(s) (counter); tools add, end_turn\n")
    assert load_bundle(bundle).problems == []


@pytest.mark.bwrap
def test_a_check_leaves_no_sandbox_folder_behind(tmp_path):
    """A one-off check serves no instance of its own: its local sandbox's folder goes with it."""
    folders = lambda: set(Path(tempfile.gettempdir()).glob("corral-once-*"))
    before = folders()
    assert corral_check(write_bundle(tmp_path)).exit_code == 0
    assert folders() - before == set()


@pytest.mark.parametrize("name", ["gridsim", "tictactoe"])
def test_the_example_bundles_pass(name):
    result = corral_check(ROOT / "bundles" / name)

    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{name}: ")
    assert len(result.output.splitlines()) == 1


def break_everything(bundle: Path) -> None:
    """Ten problems at once, in every file kind a bundle has."""
    # bundle.toml: a key the format does not have.
    write(
        bundle / "bundle.toml",
        (bundle / "bundle.toml")
        .read_text()
        .replace('description = "Add up to ten."', 'description = "Add up to ten."\ncolour = "blue"'),
    )
    # tasks: an unknown env, an unknown verifier, a tool the env lacks, a reused id, bad JSON.
    add_task_file(bundle, "lost", env="nowhere", verifiers={"total": "total"})
    add_task_file(bundle, "unjudged", env="counter", verifiers={"total": "judge"})
    add_task_file(bundle, "greedy", env="counter", verifiers={"total": "total"}, tools=["add", "multiply"])
    add_task_file(bundle, "tiny-2", env="counter", verifiers={"total": "total"})
    add_task_line(bundle, '{"id": "tiny-3", "prompt": ')
    # evals: an unknown task id, and the reserved split name.
    write(bundle / "evals" / "train.toml", 'tasks = ["tiny-1", "ghost"]\n')
    write(bundle / "evals" / "all.toml", 'tasks = ["tiny-1"]\n')
    # an env whose tool has no docstring, and a verifier without verify().
    add_env(bundle, "shouter", UNDOCUMENTED_ENV, "env:Shouter")
    write(bundle / "verifiers" / "silent.py", "SCORE = 1.0\n")


# Where each problem is reported, and a fragment of what it says.
EXPECTED = [
    ("tiny/bundle.toml", "unknown key 'colour'"),
    ("task lost", "env 'nowhere' is not a folder under envs/"),
    ("task unjudged", "verifier 'judge', but verifiers/judge.py does not exist"),
    ("tiny/tasks/tiny-2.json", "task id 'tiny-2' is already used in tiny/tasks.jsonl:1"),
    ("tiny/tasks.jsonl:2", "not valid JSON"),
    ("tiny/evals/train.toml", "1 task id(s) not in the bundle: ghost"),
    ("tiny/evals/all.toml", "the split 'all' is every task of the bundle; rename this eval"),
    ("tiny/envs/shouter", "the env does not start"),
    ("task greedy", "offers tool(s) multiply that env counter does not have (it has: add)"),
    ("tiny/verifiers/silent.py", "defines no function verify(task, report); add one"),
]
NEEDS_THE_ENV_OR_VERIFIER = {"tiny/envs/shouter", "task greedy", "tiny/verifiers/silent.py"}


@pytest.mark.bwrap
def test_check_reports_every_problem_of_a_bundle_in_one_run(tmp_path):
    bundle = write_bundle(tmp_path)
    break_everything(bundle)

    result = corral_check(bundle)

    assert result.exit_code == 1
    assert f"has {len(EXPECTED)} problem(s):" in result.output
    lines = problem_lines(result.output)
    assert len(lines) == len(EXPECTED), result.output
    for where, says in EXPECTED:
        assert any(line.startswith(f"{where}: ") and says in line for line in lines), (where, result.output)
    # The env that does not start is reported with the runtime's reason, naming the tool.
    assert "tool shout: it has no docstring" in result.output
    assert "tiny/verifiers/silent.py: defines no function verify(task, report); add one" in lines


def test_load_bundle_lists_the_problems_found_without_running_anything(tmp_path):
    bundle = write_bundle(tmp_path)
    break_everything(bundle)

    problems = load_bundle(bundle).problems

    found = sorted((problem.file, problem.message) for problem in problems)
    expected = [item for item in EXPECTED if item[0] not in NEEDS_THE_ENV_OR_VERIFIER]
    assert len(found) == len(expected), found
    for where, says in expected:
        assert any(file == where and says in message for file, message in found), (where, found)


def test_a_stray_key_in_bundle_toml_is_its_only_problem(tmp_path):
    bundle = write_bundle(tmp_path)
    write(bundle / "bundle.toml", 'colour = "blue"\n' + (bundle / "bundle.toml").read_text())

    problems = [str(problem) for problem in load_bundle(bundle).problems]

    # The tasks still get env and verifiers from [defaults].
    assert problems == [
        ("tiny/bundle.toml: unknown key 'colour'; remove it (see docs/bundle-format.md for the keys of bundle.toml)")
    ]


def test_bundle_toml_that_is_not_toml_is_reported_with_its_file(tmp_path):
    bundle = write_bundle(tmp_path)
    write(bundle / "bundle.toml", 'name = "tiny\n')

    problems = [str(problem) for problem in load_bundle(bundle).problems]

    assert problems[0].startswith("tiny/bundle.toml: not valid TOML:")
    assert problems[0].endswith("fix the syntax")


@pytest.mark.bwrap
def test_a_task_with_two_scores_needs_a_reward_rule(tmp_path):
    bundle = write_bundle(tmp_path)
    add_task_file(bundle, "tiny-3", verifiers={"total": "total", "again": "total"})

    result = corral_check(bundle)

    assert result.exit_code == 1
    assert problem_lines(result.output) == [
        (
            "task tiny-3: the task records 2 scores (again, total) and no reward was chosen: pick one "
            "with reward='again' (corral serve --reward again), or combine them with a function of the "
            "scores, e.g. reward=lambda s: sum(s.values()) / len(s)"
        )
    ]


@pytest.mark.bwrap
def test_a_serve_reward_in_bundle_toml_picks_the_score(tmp_path):
    bundle = write_bundle(
        tmp_path,
        bundle_toml=(
            'name = "tiny"\n[defaults]\nenv = "counter"\nverifiers = { total = "total" }\n[serve]\nreward = "total"\n'
        ),
    )
    add_task_file(bundle, "tiny-3", verifiers={"total": "total", "again": "total"})

    result = corral_check(bundle)

    assert result.exit_code == 0, result.output
    assert result.output.startswith("tiny: 3 tasks;")


# The split `train` -----------------------------------------------------------------------


def split_ids(bundle: Path) -> list[tuple[str, list[str]]]:
    """Each split's name and task ids, in the bundle's order of splits."""
    return [(name, [task.id for task in tasks]) for name, tasks in load_bundle(bundle).splits.items()]


def test_train_is_every_task_in_no_eval_split(tmp_path):
    bundle = write_bundle(tmp_path)
    (bundle / "evals" / "train.toml").unlink()
    add_task_file(bundle, "tiny-3")
    write(bundle / "evals" / "eval.toml", 'tasks = ["tiny-1"]\n')
    write(bundle / "evals" / "hard.toml", 'tasks = ["tiny-3"]\n')

    assert split_ids(bundle) == [
        ("all", ["tiny-2", "tiny-1", "tiny-3"]),
        ("train", ["tiny-2"]),
        ("eval", ["tiny-1"]),
        ("hard", ["tiny-3"]),
    ]


def test_evals_train_toml_names_the_train_split_itself(tmp_path):
    bundle = write_bundle(tmp_path)
    write(bundle / "evals" / "train.toml", 'tasks = ["tiny-2", "tiny-1"]\n')
    write(bundle / "evals" / "eval.toml", 'tasks = ["tiny-1"]\n')

    assert split_ids(bundle) == [
        ("all", ["tiny-2", "tiny-1"]),
        ("train", ["tiny-2", "tiny-1"]),  # the file's list, in its order, eval tasks and all
        ("eval", ["tiny-1"]),
    ]


@pytest.mark.bwrap
def test_a_bundle_of_eval_tasks_only_has_an_empty_train_split_and_says_so(tmp_path):
    bundle = write_bundle(tmp_path)
    (bundle / "evals" / "train.toml").unlink()
    write(bundle / "evals" / "eval.toml", 'tasks = ["tiny-1", "tiny-2"]\n')

    result = corral_check(bundle)

    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "tiny: 2 tasks; splits all (2), train (0: every task is in an eval split), eval (2); "
    )


# A problem many tasks share is one line --------------------------------------------------


def with_tasks(tmp_path, count: int, defaults: str) -> Path:
    """The clean bundle with `count` tasks (t-01, t-02, ...) in tasks.jsonl, and [defaults]
    changed by `defaults` (appended to its table)."""
    bundle = write_bundle(tmp_path)
    (bundle / "tasks" / "tiny-1.json").unlink()
    (bundle / "tasks.jsonl").unlink()
    (bundle / "evals" / "train.toml").unlink()
    for number in range(1, count + 1):
        add_task_line(bundle, json.dumps({"id": f"t-{number:02}", "prompt": "Reach 10."}))
    text = (bundle / "bundle.toml").read_text()
    write(bundle / "bundle.toml", text.replace('verifiers = { total = "total" }\n', defaults))
    return bundle


@pytest.mark.bwrap
def test_a_missing_verifier_shared_by_fifty_tasks_is_one_line(tmp_path):
    bundle = with_tasks(tmp_path, 50, 'verifiers = { total = "totl" }\n')

    result = corral_check(bundle)

    assert result.exit_code == 1
    assert problem_lines(result.output) == [
        (
            "50 tasks (t-01, t-02, t-03 and 47 more): score 'total' names verifier 'totl', but "
            "verifiers/totl.py does not exist, nor verifiers/totl.toml (verifiers: total)"
        )
    ]


def test_a_field_missing_from_every_task_line_is_one_line(tmp_path):
    bundle = with_tasks(tmp_path, 50, "")

    problems = [str(problem) for problem in load_bundle(bundle).problems]

    assert problems == [
        (
            "50 tasks (tiny/tasks.jsonl:1, tiny/tasks.jsonl:2, tiny/tasks.jsonl:3 and 47 more): "
            "'verifiers' is missing; add it to the task"
        )
    ]


@pytest.mark.bwrap
def test_a_tool_missing_from_the_env_for_fifty_tasks_is_one_line(tmp_path):
    bundle = with_tasks(tmp_path, 50, 'verifiers = { total = "total" }\ntools = ["add", "subtract"]\n')

    result = corral_check(bundle)

    assert result.exit_code == 1
    assert problem_lines(result.output) == [
        (
            "50 tasks (t-01, t-02, t-03 and 47 more): offers tool(s) subtract that env counter does not "
            "have (it has: add); fix 'tools'"
        )
    ]


def test_problems_of_two_tasks_name_both(tmp_path):
    bundle = with_tasks(tmp_path, 2, 'verifiers = { total = "totl" }\n')

    problems = [problem.file for problem in load_bundle(bundle).problems]

    assert problems == ["2 tasks (t-01, t-02)"]


@pytest.mark.bwrap
def test_an_env_tool_named_as_the_environment_classs_method_is_refused(tmp_path):
    """A tool named get_reward would hide the method TRL calls on the generated class."""
    bundle = write_bundle(tmp_path)
    add_env(
        bundle, "counter", COUNTER_ENV.replace("def add(self, n: int)", "def get_reward(self, n: int)"), "env:Counter"
    )
    write(bundle / "tasks.jsonl", "")

    result = corral_check(bundle)

    assert result.exit_code == 1
    assert "tiny/envs/counter: tool name(s) get_reward are reserved by corral; rename them" in result.output
