"""The env runtime (`python -m corral.env MODULE:CLASS`) as the server sees it: JSON-RPC lines."""

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from corral.env.runtime import LoadError, load_env

SANDBOXES = Path(__file__).parents[2] / "sandboxes"

GRID = '''
from corral.env import Env, tool


class Grid(Env):
    def reset(self, task: dict) -> None:
        self.prices = task["prices"]
        self.actions = []
        self.turns = 0

    @tool
    def submit_schedule(self, actions: list[int], note: str | None = None) -> dict:
        """Submit the day's schedule.

        Args:
            actions: one integer per hour: +1 charge, -1 discharge, 0 idle.
            note: a remark kept with the schedule
        """
        print("submitting", actions)
        self.actions = actions
        return {"revenue": sum(a * p for a, p in zip(actions, self.prices))}

    @tool
    def price(self, hour: int) -> float:
        """The price of one hour.

        Args:
            hour: the hour, 0 to 23
        """
        return self.prices[hour]

    @tool
    def explode(self) -> str:
        """Fail on purpose."""
        raise RuntimeError("battery on fire")

    @tool
    def shapeless(self) -> object:
        """Return something JSON has no word for."""
        return {1, 2}

    def end_turn(self, response: str) -> str | None:
        self.turns += 1
        return f"turn {self.turns + 1}: you said {response}" if self.turns < 2 else None

    def report(self) -> dict:
        return {"actions": self.actions, "turns": self.turns}
'''

BROKEN = """
from corral.env import Env, tool


class Broken(Env):
    @tool
    def submit_schedule(self, actions: list[int]) -> dict:
        return {}

    @tool
    def price(self, hour) -> float:
        '''The price of one hour.

        Args:
            hour: the hour, 0 to 23
        '''

    @tool
    def report(self) -> dict:
        '''What was done.'''
"""


class EnvProcess:
    """The runtime as a child process, spoken to one JSON-RPC line at a time."""

    def __init__(self, folder: Path, entry: str):
        self.stderr_path = folder / "stderr.txt"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SANDBOXES), str(folder)])}
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corral.env", entry],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=folder,
                env=env,
            )
        self.next_id = 0

    def send_line(self, line: str) -> dict:
        """Write one raw line and read the reply line."""
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], 5)
        assert ready, f"no reply to {line!r}; stderr: {self.stderr()}"
        return json.loads(self.process.stdout.readline())

    def request(self, method: str, params: dict | None = None) -> dict:
        """Send a request and return its whole reply (result or error)."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        reply = self.send_line(json.dumps(message))
        assert reply["id"] == self.next_id
        return reply

    def call(self, name: str, **arguments) -> dict:
        """Call a tool and return the tools/call result."""
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def close(self) -> int:
        """Close stdin, as the server does at the end of an episode, and return the exit code."""
        self.process.stdin.close()
        code = self.process.wait(timeout=5)
        self.process.stdout.close()
        return code


@pytest.fixture
def grid(tmp_path):
    (tmp_path / "gridenv.py").write_text(GRID)
    process = EnvProcess(tmp_path, "gridenv:Grid")
    process.request("corral/reset", {"task": {"prices": [30.0, 50.0, 20.0]}})
    yield process
    if process.process.poll() is None:
        process.close()


def test_initialize_names_the_env_class_and_declares_tools_and_corral_hooks(grid):
    result = grid.request("initialize", {"protocolVersion": "2025-06-18"})["result"]

    assert result == {
        "protocolVersion": "2025-06-18",
        "capabilities": {
            "tools": {},
            "experimental": {
                "corral": {"hooks": ["corral/reset", "corral/end_turn", "corral/report"]}
            },
        },
        "serverInfo": {"name": "Grid", "version": "corral-env/1"},
    }


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-06-18"),
        (None, "2025-06-18"),
    ],
)
def test_initialize_echoes_a_protocol_version_it_speaks_and_else_offers_its_own(
    grid, asked, answered
):
    params = {} if asked is None else {"protocolVersion": asked}

    assert grid.request("initialize", params)["result"]["protocolVersion"] == answered


def test_params_null_is_taken_as_no_params(grid):
    listed = grid.send_line('{"jsonrpc":"2.0","id":7,"method":"tools/list","params":null}')
    called = grid.send_line(
        '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"price","arguments":null}}'
    )

    assert listed["result"]["tools"][0]["name"] == "submit_schedule"
    assert called["result"]["content"][0]["text"].startswith("price: argument 'hour' is missing")


def test_a_notification_gets_no_reply(grid):
    grid.process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    assert grid.request("ping")["result"] == {}


def test_tools_list_gives_each_tool_with_its_schema_in_definition_order(grid):
    tools = grid.request("tools/list")["result"]["tools"]

    assert [t["name"] for t in tools] == ["submit_schedule", "price", "explode", "shapeless"]
    assert tools[0]["description"] == "Submit the day's schedule."
    assert tools[0]["inputSchema"]["properties"]["actions"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "one integer per hour: +1 charge, -1 discharge, 0 idle.",
    }
    assert tools[0]["inputSchema"]["required"] == ["actions"]


def test_a_tool_that_returns_a_dict_gives_json_text_and_structured_content(grid):
    result = grid.call("submit_schedule", actions=[1, 0, -1])

    assert result == {
        "content": [{"type": "text", "text": '{"revenue":10.0}'}],
        "isError": False,
        "structuredContent": {"revenue": 10.0},
    }


def test_a_tool_that_returns_a_number_gives_json_text_only(grid):
    assert grid.call("price", hour=1) == {
        "content": [{"type": "text", "text": "50.0"}],
        "isError": False,
    }


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "submit_schedule: argument 'actions' is missing; it must be an array of integers"),
        (
            {"actions": [1], "hours": 3},
            "submit_schedule: unknown argument 'hours'; its arguments are 'actions', 'note'",
        ),
        (
            {"actions": "1,0,-1"},
            "submit_schedule: argument 'actions' must be an array of integers; got \"1,0,-1\"",
        ),
        (
            {"actions": [1, 0, 0, "x"]},
            "submit_schedule: argument 'actions' must be an array of integers; item 3 is \"x\"",
        ),
        (
            {"actions": [1, 0.5]},
            "submit_schedule: argument 'actions' must be an array of integers; item 1 is 0.5",
        ),
        (
            {"actions": [True]},
            "submit_schedule: argument 'actions' must be an array of integers; item 0 is true",
        ),
        (
            {"actions": [1], "note": 7},
            "submit_schedule: argument 'note' must be a string or null; got 7",
        ),
    ],
    ids=["missing", "unknown", "wrong-type", "wrong-item", "float-item", "bool-item", "nullable"],
)
def test_bad_arguments_give_an_error_result_that_says_what_is_expected(grid, arguments, text):
    result = grid.call("submit_schedule", **arguments)

    assert result == {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"corral/error_type": "invalid_args"},
    }
    assert "submitting" not in grid.stderr()


def test_a_null_optional_argument_is_accepted(grid):
    assert grid.call("submit_schedule", actions=[1], note=None)["isError"] is False


def test_an_unknown_tool_gives_an_error_result_listing_the_tools(grid):
    result = grid.call("charge")

    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "unknown tool 'charge'; the tools are: submit_schedule, price, explode, shapeless"
    )
    assert result["_meta"] == {"corral/error_type": "tool_not_found"}


def test_a_raising_tool_gives_an_error_result_and_the_episode_goes_on(grid):
    result = grid.call("explode")

    assert result == {
        "content": [{"type": "text", "text": "explode failed: RuntimeError: battery on fire"}],
        "isError": True,
        "_meta": {"corral/error_type": "execution_error"},
    }
    assert "Traceback" in grid.stderr()
    assert grid.call("price", hour=0)["isError"] is False


def test_a_tool_that_returns_a_value_json_cannot_hold_gives_an_execution_error(grid):
    result = grid.call("shapeless")

    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(
        "shapeless failed: it returned a value that is not JSON"
    )
    assert result["_meta"] == {"corral/error_type": "execution_error"}


def test_print_in_a_tool_goes_to_stderr_not_into_the_protocol(grid):
    grid.call("submit_schedule", actions=[1, 1, 1])

    assert grid.request("ping")["result"] == {}
    assert "submitting [1, 1, 1]" in grid.stderr()


def test_end_turn_gives_the_next_prompt_then_none_and_report_gives_what_was_done(grid):
    grid.call("submit_schedule", actions=[-1, 1, 0])

    first = grid.request("corral/end_turn", {"response": "charged at hour 1"})["result"]
    second = grid.request("corral/end_turn", {"response": "done"})["result"]
    report = grid.request("corral/report")["result"]

    assert first == {"prompt": "turn 2: you said charged at hour 1"}
    assert second == {"prompt": None}
    assert report == {"report": {"actions": [-1, 1, 0], "turns": 2}}


def test_a_failing_reset_is_a_json_rpc_error_with_the_traceback(grid):
    reply = grid.request("corral/reset", {"task": {}})

    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"] == "KeyError: 'prices'"
    assert "Traceback" in reply["error"]["data"]["traceback"]
    assert grid.request("ping")["result"] == {}


def test_invalid_params_are_a_json_rpc_error(grid):
    reply = grid.request("corral/end_turn", {"response": 3})

    assert reply["error"]["code"] == -32602


def test_an_unknown_method_is_method_not_found(grid):
    assert grid.request("resources/list")["error"]["code"] == -32601


def test_a_garbage_line_is_a_parse_error_and_a_non_object_an_invalid_request(grid):
    garbage = grid.send_line("this is not json")
    not_an_object = grid.send_line("[1, 2]")

    assert garbage["id"] is None and garbage["error"]["code"] == -32700
    assert not_an_object["id"] is None and not_an_object["error"]["code"] == -32600
    assert grid.request("ping")["result"] == {}


def test_end_of_input_exits_0(grid):
    assert grid.close() == 0


def test_tools_that_cannot_be_described_exit_2_with_every_fix_on_stderr(tmp_path):
    (tmp_path / "brokenenv.py").write_text(BROKEN)

    process = EnvProcess(tmp_path, "brokenenv:Broken")

    assert process.process.wait(timeout=5) == 2
    process.process.stdout.close()
    process.process.stdin.close()
    header, *lines = process.stderr().strip().splitlines()
    assert header == (
        "corral.env: cannot serve brokenenv:Broken: Broken has 3 tool(s) that cannot be described:"
    )
    assert lines == [
        "    tool submit_schedule: it has no docstring; add one that says what the tool does, "
        + "with an 'Args:' section that describes each parameter",
        "    tool price: parameter 'hour' has no type hint; add one, as 'hour: str'",
        "    tool report: the name is Env's own method, which the server calls itself; "
        + "rename the tool (e.g. 'report_state')",
    ]


def test_blank_lines_between_requests_are_skipped(grid):
    grid.process.stdin.write(b"\n   \n")
    assert grid.request("ping")["result"] == {}


def test_tools_call_without_a_name_or_with_arguments_that_are_no_object_is_invalid_params(grid):
    assert grid.request("tools/call", {"arguments": {}})["error"]["code"] == -32602
    assert grid.request("tools/call", {"name": "price", "arguments": [3]})["error"]["code"] == -32602
    no_arguments = grid.request("tools/call", {"name": "price"})["result"]  # taken as {}: the tool says what is missing
    assert no_arguments["isError"] is True and "hour" in no_arguments["content"][0]["text"]


def test_an_env_module_that_raises_as_it_loads_exits_2_with_its_traceback(tmp_path):
    (tmp_path / "crashing.py").write_text("raise RuntimeError('no config found')\n")
    process = EnvProcess(tmp_path, "crashing:Env")
    assert process.process.wait(timeout=5) == 2
    process.process.stdout.close()
    process.process.stdin.close()
    stderr = process.stderr()
    assert "RuntimeError: no config found" in stderr and "Traceback" in stderr
    assert stderr.strip().endswith("cannot serve crashing:Env: the error above was raised while loading it")


ENVS = '''
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
'''


@pytest.mark.parametrize(("entry", "error"), [
    ("plainenv", "expected MODULE:CLASS, e.g. env:GridSim"),
    ("plainenv:", "expected MODULE:CLASS, e.g. env:GridSim"),
    (":Plain", "expected MODULE:CLASS, e.g. env:GridSim"),
    ("nosuchenv:Plain", "no module named 'nosuchenv' in {cwd} or a --path folder; run from the env's folder or pass --path DIR"),
    ("plainenv:Missing", "module 'plainenv' has no 'Missing'; check env.toml's entry"),
    ("plainenv:Outer.Missing", "module 'plainenv' has no 'Outer.Missing'; check env.toml's entry"),
    ("plainenv:not_a_class", "'not_a_class' is not a subclass of corral.env.Env; subclass it: 'class not_a_class(Env):'"),
    ("plainenv:NotAnEnv", "'NotAnEnv' is not a subclass of corral.env.Env; subclass it: 'class NotAnEnv(Env):'"),
])
def test_an_entry_that_names_no_env_class_says_what_to_fix(tmp_path, monkeypatch, entry, error):
    (tmp_path / "plainenv.py").write_text(ENVS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plainenv", raising=False)
    with pytest.raises(LoadError) as refused:
        load_env(entry)
    assert str(refused.value) == error.format(cwd=tmp_path)


def test_an_entry_may_name_a_nested_class_and_a_missing_import_of_the_env_is_not_blamed_on_the_entry(tmp_path, monkeypatch):
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
    process = subprocess.run([sys.executable, "-m", "corral.env", "gridenv:Grid", "--path", "envs"], cwd=tmp_path,
                             input=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n', capture_output=True, env=environ,
                             timeout=30, check=False)
    assert (process.returncode, json.loads(process.stdout)) == (0, {"jsonrpc": "2.0", "id": 1, "result": {}})


def test_a_channel_socket_that_cannot_be_reached_exits_2_saying_so(tmp_path):
    (tmp_path / "gridenv.py").write_text(GRID)
    environ = {**os.environ, "PYTHONPATH": str(SANDBOXES), "CORRAL_CHANNEL": str(tmp_path / "gone.sock")}
    process = subprocess.run([sys.executable, "-m", "corral.env", "gridenv:Grid"], cwd=tmp_path, capture_output=True,
                             env=environ, timeout=30, stdin=subprocess.DEVNULL, check=False)
    assert process.returncode == 2
    assert f"corral.env: cannot connect to the server's socket {tmp_path / 'gone.sock'}" in process.stderr.decode()
