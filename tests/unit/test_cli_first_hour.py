"""The `corral` command in a new user's first hour: `--version`, `corral init`, and every mistake
in how it is called answered with one line on stderr saying what to do, exit status 2, and
no traceback.

Each test runs the installed `corral` command, as a user would.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# Out of the fast tier: each test starts the command, which imports the server (seconds each).
pytestmark = pytest.mark.slow

CORRAL = str(Path(sys.executable).with_name("corral"))
STARTER_FILES = [
    "bundle.toml",
    "README.md",
    "envs/counter/Dockerfile",
    "envs/counter/env.py",
    "envs/counter/env.toml",
    "evals/eval.toml",
    "tasks/from-2-to-10.json",
    "tasks/from-3-to-12.json",
    "tasks/from-5-to-9.json",
    "verifiers/reached.py",
]


def corral(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CORRAL, *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


def refused(result: subprocess.CompletedProcess) -> str:
    """The one line a refused call printed on stderr (and checks it printed nothing else)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def starter(tmp_path) -> Path:
    """A bundle written by `corral init my-bundle`."""
    assert corral("init", "my-bundle", cwd=tmp_path).returncode == 0
    return tmp_path / "my-bundle"


def test_version_prints_the_installed_distributions_version():
    result = corral("--version")

    assert result.returncode == 0
    assert result.stdout == f"corral {importlib.metadata.version('corral')}\n"


def test_init_writes_a_bundle_and_says_what_to_run_next(tmp_path):
    result = corral("init", "my-bundle", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "wrote the bundle my-bundle:",
        *(f"  my-bundle/{file}" for file in STARTER_FILES),
        "next:",
        "  corral check my-bundle    # every problem at once, each with its fix",
        "  corral serve my-bundle    # then play it from Python: see my-bundle/README.md",
    ]
    root = tmp_path / "my-bundle"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == sorted(STARTER_FILES)
    assert 'name = "my-bundle"' in (root / "bundle.toml").read_text()
    assert (root / "README.md").read_text().startswith("# my-bundle\n")
    assert "{{name}}" not in (root / "README.md").read_text()
    assert "FROM debian:bookworm-slim" in (root / "envs/counter/Dockerfile").read_text()
    assert json.loads((root / "tasks/from-2-to-10.json").read_text())["args"] == {"start": 2, "target": 10}


def test_init_with_path_writes_into_that_folder(tmp_path):
    result = corral("init", "counting", "--path", str(tmp_path / "work"))

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "work" / "counting" / "bundle.toml").is_file()


def test_the_starter_bundle_passes_check_with_its_splits(starter):
    result = corral("check", str(starter), "--sandbox", "local")

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "my-bundle: 3 tasks; splits all (3), train (2), eval (1); 1 env(s) (counter); tools add, end_turn, multiply\n"
    )


def test_init_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")

    line = refused(corral("init", "taken", cwd=tmp_path))

    assert line == "error: taken is already there and not empty; pick another NAME, or --path another folder"
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_init_writes_into_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()

    assert corral("init", "empty", cwd=tmp_path).returncode == 0
    assert (tmp_path / "empty" / "bundle.toml").is_file()


@pytest.mark.parametrize("name", ["my bundle", "_private", ".hidden", "a/b"])
def test_init_refuses_a_name_that_is_not_a_bundle_name(tmp_path, name):
    line = refused(corral("init", name, cwd=tmp_path))

    assert line == (
        f"error: {name!r} is not a bundle name: use letters, digits, '.', '-' and '_', "
        "starting with a letter or digit (e.g. my-bundle)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_mistyped_sandbox_is_one_line(starter, command):
    line = refused(corral(command, str(starter), "--sandbox", "dokcer"))

    assert line == "error: unknown --sandbox 'dokcer'; choose one of: auto, docker, local, modal, kubernetes"


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_bundle_folder_that_is_not_there_is_one_line(tmp_path, command):
    line = refused(corral(command, "no-such-bundle", "--sandbox", "local", cwd=tmp_path))

    assert line == (
        "error: no bundle folder at no-such-bundle; give the folder that holds bundle.toml, "
        "or write one with: corral init NAME"
    )


def test_a_port_in_use_is_one_line_and_nothing_is_served(starter):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # A server that started anyway would not return: give up on it soon.
        line = refused(corral("serve", str(starter), "--sandbox", "local", "--port", str(port), timeout_s=30))

    assert line == (
        f"error: port {port} on 127.0.0.1 is in use (another corral serve?); "
        f"stop what listens there, or serve with --port {port + 1}"
    )


def test_docker_without_an_engine_is_one_line(starter, tmp_path):
    line = refused(
        corral("check", str(starter), "--sandbox", "docker", env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    )

    assert line == (
        "error: --sandbox docker: no Docker engine answers (DOCKER_HOST, else /var/run/docker.sock); "
        "start the engine, or serve with --sandbox local"
    )


def test_every_commands_help_shows_its_options_text_whole():
    """Typer reads help as rich markup: an unescaped `[serve]` would vanish from the page."""
    import typer.main
    from typer.testing import CliRunner

    from corral.cli.main import app

    lost = []
    for name, command in typer.main.get_command(app).commands.items():
        page = CliRunner().invoke(app, [name, "--help"], terminal_width=1000, env={"COLUMNS": "1000"}).output
        shown = " ".join(page.split())
        for text in [command.help, *(getattr(param, "help", None) for param in command.params)]:
            wanted = " ".join((text or "").replace("\\[", "[").split())
            if wanted not in shown:
                lost.append(f"corral {name}: {wanted}")
    assert lost == []


def test_check_tries_each_verifier_on_a_fresh_report_and_names_the_line_that_raises(starter):
    verifier = starter / "verifiers" / "reached.py"
    verifier.write_text("def verify(task, report):\n    return float(report['missing_key'] == 1)\n")

    result = corral("check", str(starter), "--sandbox", "local")

    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"{starter} has 1 problem(s):",
        (
            f"  - my-bundle/verifiers/reached.py: verifier reached raised KeyError: 'missing_key' at {verifier}:2 "
            "(return float(report['missing_key'] == 1)), scoring task from-2-to-10 right after its reset (the report "
            '{"count": 2, "calls": 0}); a verifier must score every report its env gives, the do-nothing agent\'s too'
        ),
    ]


def test_an_env_that_does_not_compile_points_at_the_bundles_file(starter):
    env = starter / "envs" / "counter" / "env.py"
    env.write_text(env.read_text() + "\ndef broken(:\n")
    line = len(env.read_text().splitlines())

    result = corral("check", str(starter), "--sandbox", "local")

    assert result.returncode == 1
    assert f'File "{env}", line {line}' in result.stderr  # the file to fix: not the copy the sandbox ran
    assert "SyntaxError: invalid syntax" in result.stderr and "/shared/counter-" not in result.stderr


def test_a_port_out_of_range_is_refused_not_wrapped_around(starter):
    # Unchecked, 99999 would be served on 34463 (99999 - 65536) while saying 99999.
    result = corral("serve", str(starter), "--sandbox", "local", "--port", "99999", timeout_s=30)

    assert result.returncode == 2 and "Traceback" not in result.stderr and "serving on" not in result.stdout
    assert "Invalid value for '--port'" in result.stderr and "less than or equal to 65535" in result.stderr


def test_check_says_when_an_envs_reset_fails_on_the_task_its_verifiers_are_tried_on(starter):
    env = starter / "envs" / "counter" / "env.py"
    env.write_text(env.read_text().replace('self.count = args["start"]', 'self.count = args["begin"]'))

    result = corral("check", str(starter), "--sandbox", "local")

    assert result.returncode == 1
    assert result.stderr.startswith(
        f"{starter} has 1 problem(s):\n  - my-bundle/envs/counter: its reset to task from-2-to-10, to try the "
        "task's verifiers on its report, failed: "
    )
    assert "KeyError" in result.stderr and "'begin'" in result.stderr
