"""The env runtime (`python -m corral.env MODULE:CLASS`) as the server sees it: JSON-RPC lines
(loading the env: tests/unit/test_env_loading.py)."""

import pytest

from tests.env_process import GRID, EnvProcess

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
                "corral": {"hooks": ["corral/reset", "corral/end_turn", "corral/report", "corral/run_agent"]}
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
def test_initialize_echoes_a_protocol_version_it_speaks_and_else_offers_its_own(grid, asked, answered):
    params = {} if asked is None else {"protocolVersion": asked}

    assert grid.request("initialize", params)["result"]["protocolVersion"] == answered


def test_params_null_is_taken_as_no_params(grid):
    listed = grid.send_line('{"jsonrpc":"2.0","id":7,"method":"tools/list","params":null}')
    called = grid.send_line('{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"price","arguments":null}}')

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
    assert result["content"][0]["text"].startswith("shapeless failed: it returned a value that is not JSON")
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
    assert header == ("corral.env: cannot serve brokenenv:Broken: Broken has 3 tool(s) that cannot be described:")
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
