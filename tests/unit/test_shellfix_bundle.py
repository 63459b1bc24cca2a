"""The shellfix bundle and command verifiers as `corral check` sees them, and shellfix's tools.

A broken command verifier (`verifiers/<name>.toml`) is reported with its file and the fix,
like every other bundle problem; shellfix itself passes, and its tasks.jsonl is what
generate.py writes.
"""

import importlib.util
import json
import time

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.formats import load_bundle
from tests.conftest import BUNDLES
from tests.unit.test_bundle_check import problem_lines, write, write_bundle

SHELLFIX = BUNDLES / "shellfix"


def load_module(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.bwrap
def test_corral_check_passes_on_shellfix():
    result = CliRunner().invoke(app, ["check", str(SHELLFIX), "--sandbox", "local"])

    assert result.exit_code == 0, result.output
    assert result.output.startswith("shellfix: 16 tasks; splits all (16), train (12), eval (4); ")
    assert "tools bash, end_turn, read_file, replace_in_file, write_file" in result.output


def test_generate_writes_the_tasks_that_are_checked_in():
    generate = load_module("shellfix_generate", SHELLFIX / "generate.py")
    lines = (SHELLFIX / "tasks.jsonl").read_text().splitlines()

    assert [json.loads(line) for line in lines] == [generate.task(task_id) for task_id in sorted(generate.REPORTS)]
    for task_id in generate.REPORTS:
        assert (SHELLFIX / "tests" / task_id).is_dir() and (SHELLFIX / "solutions" / f"{task_id}.json").is_file()


def test_the_tests_and_fixes_are_not_in_the_env_folder_that_becomes_the_image():
    env_files = {path.name for path in (SHELLFIX / "envs" / "shellfix").iterdir() if path.name != "__pycache__"}

    assert env_files == {"Dockerfile", "env.toml", "env.py"}


def with_command_verifier(tmp_path, toml: str, **extra_files: str):
    """The clean bundle of test_bundle_check, its tasks scored by verifiers/tests.toml too."""
    bundle = write_bundle(tmp_path)
    text = (bundle / "bundle.toml").read_text()
    text = text.replace('verifiers = { total = "total" }', 'verifiers = { total = "total", tests = "tests" }')
    write(bundle / "bundle.toml", text + '[serve]\nreward = "tests"\n')
    write(bundle / "verifiers" / "tests.toml", toml)
    for relative, content in extra_files.items():
        write(bundle / relative, content)
    return bundle


GOOD = 'command = ["python3", "{files}/check.py"]\nfiles = "checks/{task_id}"\ntimeout_s = 5\n'


def test_a_clean_command_verifier_passes(tmp_path):
    bundle = with_command_verifier(tmp_path, GOOD, **{"checks/tiny-1/check.py": "", "checks/tiny-2/check.py": ""})

    loaded = load_bundle(bundle)

    assert loaded.problems == []
    assert loaded.command_verifiers["tests"].files_for("tiny-2") == ["checks/tiny-2"]
    assert loaded.command_verifiers["tests"].command_for("tiny-2", "/tmp/x") == ["python3", "/tmp/x/check.py"]


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('command = ["true"\n', "tiny/verifiers/tests.toml: not valid TOML"),
        ('command = ["true"]\ntimeout = 5\n', "tiny/verifiers/tests.toml: unknown key 'timeout'; remove it"),
        ('files = "checks"\n', "tiny/verifiers/tests.toml: 'command' is missing; add it to a command verifier"),
        ("command = []\n", "tiny/verifiers/tests.toml: 'command': List should have at least 1 item"),
        (
            'command = ["true"]\ntimeout_s = 0\n',
            "tiny/verifiers/tests.toml: 'timeout_s': Input should be greater than 0",
        ),
        (
            'command = ["python3", "{file}/check.py"]\nfiles = "checks/{task_id}"\n',
            "tiny/verifiers/tests.toml: command has an unknown placeholder {file}; it may use {files} and {task_id}",
        ),
        (
            'command = ["python3", "{files}/check.py"]\nfiles = "checks/{task}"\n',
            "tiny/verifiers/tests.toml: files has an unknown placeholder {task}; it may use {task_id}",
        ),
        (
            'command = ["python3", "{files}/check.py"]\nfiles = "../elsewhere"\n',
            "tiny/verifiers/tests.toml: files entry '../elsewhere' is not inside the bundle",
        ),
        (
            'command = ["python3", "check.py"]\nfiles = "checks/{task_id}"\n',
            "tiny/verifiers/tests.toml: files are copied in, but command never names them; use {files}",
        ),
    ],
)
@pytest.mark.bwrap
def test_a_broken_command_verifier_is_reported_once_with_its_fix(tmp_path, toml, says):
    bundle = with_command_verifier(tmp_path, toml, **{"checks/tiny-1/check.py": "", "checks/tiny-2/check.py": ""})

    result = CliRunner().invoke(app, ["check", str(bundle), "--sandbox", "local"])

    assert result.exit_code == 1
    assert problem_lines(result.output) and problem_lines(result.output)[0].startswith(says), result.output
    # Reported at its file, not again by each task that uses it.
    assert len(problem_lines(result.output)) == 1, result.output


@pytest.mark.bwrap
def test_a_task_whose_files_folder_is_missing_is_named(tmp_path):
    bundle = with_command_verifier(tmp_path, GOOD, **{"checks/tiny-1/check.py": ""})

    result = CliRunner().invoke(app, ["check", str(bundle), "--sandbox", "local"])

    assert result.exit_code == 1
    assert problem_lines(result.output) == [
        "task tiny-2: verifier tests copies 'checks/tiny-2' into the sandbox, but tiny/checks/tiny-2 does not exist; add it"
    ]


def test_a_python_and_a_command_verifier_of_one_name_are_a_problem(tmp_path):
    bundle = with_command_verifier(
        tmp_path,
        GOOD,
        **{
            "checks/tiny-1/check.py": "",
            "checks/tiny-2/check.py": "",
            "verifiers/tests.py": "def verify(task, report):\n    return 1.0\n",
        },
    )

    problems = [str(problem) for problem in load_bundle(bundle).problems]

    assert problems == ["tiny/verifiers/tests.toml: verifiers/tests.py has the same name; rename one of them"]


@pytest.fixture
def shellfix_env(tmp_path, monkeypatch):
    """ShellFix, reset on the paginate task in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    env = load_module("shellfix_env", SHELLFIX / "envs" / "shellfix" / "env.py").ShellFix()
    task = next(
        json.loads(line)
        for line in (SHELLFIX / "tasks.jsonl").read_text().splitlines()
        if json.loads(line)["id"] == "shellfix-paginate"
    )
    env.reset(task["args"])
    return env


def test_reset_writes_the_repository_into_the_working_directory(shellfix_env, tmp_path):
    assert sorted(path.name for path in tmp_path.iterdir()) == ["paginate.py"]
    assert "def page(" in shellfix_env.read_file("paginate.py")


def test_file_tools_stay_inside_the_repository(shellfix_env):
    with pytest.raises(ValueError, match="is outside the repository"):
        shellfix_env.read_file("../../etc/passwd")
    with pytest.raises(ValueError, match="is outside the repository"):
        shellfix_env.write_file("/tmp/elsewhere.py", "x = 1\n")


def test_replace_in_file_wants_exactly_one_occurrence(shellfix_env):
    with pytest.raises(ValueError, match="the old text does not occur in paginate.py"):
        shellfix_env.replace_in_file("paginate.py", "no such text", "x")
    with pytest.raises(
        ValueError, match=r"the old text occurs \d+ times in paginate.py; give a piece that occurs exactly once"
    ):
        shellfix_env.replace_in_file("paginate.py", "size", "n")
    assert shellfix_env.replace_in_file("paginate.py", "- 1]", "]") == "replaced 1 occurrence in paginate.py"


def test_bash_stops_background_processes_when_the_call_returns(shellfix_env):
    started = shellfix_env.bash("sleep 300 & echo $!")
    pid = int(started.splitlines()[0])

    assert started.endswith("[exit status 0]")
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
