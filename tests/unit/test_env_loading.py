"""The env runtime loading its env (`python -m corral.env MODULE:CLASS [--path FOLDER]`): an entry
that names no env class, a module that raises as it loads, an env that misbehaves in ways only
a process shows, and a channel socket it cannot reach, each said with what to fix."""

import json
import os
import subprocess
import sys

import pytest

from corral.env.runtime import LoadError, load_env
from tests.env_process import GRID, SANDBOXES, EnvProcess


def test_an_env_module_that_raises_as_it_loads_exits_2_with_its_traceback(tmp_path):
    (tmp_path / "crashing.py").write_text("raise RuntimeError('no config found')\n")
    process = EnvProcess(tmp_path, "crashing:Env")
    assert process.process.wait(timeout=5) == 2
    process.process.stdout.close()
    process.process.stdin.close()
    stderr = process.stderr()
    assert "RuntimeError: no config found" in stderr and "Traceback" in stderr
    assert stderr.strip().endswith("cannot serve crashing:Env: the error above was raised while loading it")


ENVS = """
from corral.env import Env


class Plain(Env):
    pass


class Outer:
    class Inner(Env):
        pass


def not_a_class():
    pass


class NotAnEnv:
    pass
"""


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("plainenv", "expected MODULE:CLASS, e.g. env:GridSim"),
        ("plainenv:", "expected MODULE:CLASS, e.g. env:GridSim"),
        (":Plain", "expected MODULE:CLASS, e.g. env:GridSim"),
        (
            "nosuchenv:Plain",
            "no module named 'nosuchenv' in {cwd} or a --path folder; run from the env's folder or pass --path DIR",
        ),
        ("plainenv:Missing", "module 'plainenv' has no 'Missing'; check env.toml's entry"),
        ("plainenv:Outer.Missing", "module 'plainenv' has no 'Outer.Missing'; check env.toml's entry"),
        (
            "plainenv:not_a_class",
            "'not_a_class' is not a subclass of corral.env.Env; subclass it: 'class not_a_class(Env):'",
        ),
        ("plainenv:NotAnEnv", "'NotAnEnv' is not a subclass of corral.env.Env; subclass it: 'class NotAnEnv(Env):'"),
    ],
)
def test_an_entry_that_names_no_env_class_says_what_to_fix(tmp_path, monkeypatch, entry, error):
    (tmp_path / "plainenv.py").write_text(ENVS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plainenv", raising=False)
    with pytest.raises(LoadError) as refused:
        load_env(entry)
    assert str(refused.value) == error.format(cwd=tmp_path)


def test_an_entry_may_name_a_nested_class_and_a_missing_import_of_the_env_is_not_blamed_on_the_entry(
    tmp_path, monkeypatch
):
    (tmp_path / "plainenv.py").write_text(ENVS)
    (tmp_path / "needy.py").write_text("import nosuchdependency\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("plainenv", "needy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert type(load_env("plainenv:Outer.Inner")).__name__ == "Inner"
    with pytest.raises(ModuleNotFoundError, match="nosuchdependency"):
        load_env("needy:Env")


ODD = '''
import subprocess

from corral.env import Env, tool


class Odd(Env):
    def reset(self, task: dict) -> None:
        self.kind = task["report"]

    @tool
    def spawn(self) -> str:
        """Run a child process that writes to its stdout and reads its stdin."""
        subprocess.run(["sh", "-c", "echo from-the-child; cat"], check=True)
        return "done"

    def report(self):
        circular = {}
        circular["self"] = circular
        return {"list": [1], "set": {"x": {1}}, "circular": circular}[self.kind]
'''


@pytest.fixture
def odd(tmp_path):
    (tmp_path / "oddenv.py").write_text(ODD)
    process = EnvProcess(tmp_path, "oddenv:Odd")
    yield process
    if process.process.poll() is None:
        process.close()


def test_a_child_process_of_a_tool_writes_to_stderr_and_reads_nothing_of_the_protocol(odd):
    odd.request("corral/reset", {"task": {"report": "list"}})
    assert odd.call("spawn")["content"][0]["text"] == "done"  # `cat` read /dev/null, not the next request
    assert odd.request("ping")["result"] == {}
    assert "from-the-child" in odd.stderr()


@pytest.mark.parametrize("kind", ["list", "set", "circular"])
def test_a_report_that_is_no_json_object_is_an_error_saying_what_to_return(odd, kind):
    odd.request("corral/reset", {"task": {"report": kind}})
    error = odd.request("corral/report")["error"]
    assert error["code"] == -32000
    assert error["message"].startswith("report returned a value that is not a JSON object (")
    assert error["message"].endswith("); return a dict of str, numbers, lists and dicts")


def test_path_adds_a_folder_to_import_the_env_from(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "gridenv.py").write_text(GRID)
    environ = {**os.environ, "PYTHONPATH": str(SANDBOXES)}
    process = subprocess.run(
        [sys.executable, "-m", "corral.env", "gridenv:Grid", "--path", "envs"],
        cwd=tmp_path,
        input=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n',
        capture_output=True,
        env=environ,
        timeout=30,
        check=False,
    )
    assert (process.returncode, json.loads(process.stdout)) == (0, {"jsonrpc": "2.0", "id": 1, "result": {}})


def test_a_channel_socket_that_cannot_be_reached_exits_2_saying_so(tmp_path):
    (tmp_path / "gridenv.py").write_text(GRID)
    environ = {**os.environ, "PYTHONPATH": str(SANDBOXES), "CORRAL_CHANNEL": str(tmp_path / "gone.sock")}
    process = subprocess.run(
        [sys.executable, "-m", "corral.env", "gridenv:Grid"],
        cwd=tmp_path,
        capture_output=True,
        env=environ,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert process.returncode == 2
    assert f"corral.env: cannot connect to the server's socket {tmp_path / 'gone.sock'}" in process.stderr.decode()
