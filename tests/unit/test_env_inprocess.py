"""The in-process env connection (`env_inprocess.InProcessConnection`): tools the server answers
itself for a sandbox with no env process (a Harbor task's container), with no JSON-RPC lines in
between; what the episode reads of their answers; a sandbox that stops mid-call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from corral.errors import SandboxError
from corral.sandboxes import CommandResult, Sandbox, SandboxProcess
from corral.server.connection.base import EnvDied
from corral.server.connection.inprocess import InProcessConnection
from corral.server.episodes.env_answers import tool_answer
from corral.server.harbor.hosted import connect
from corral.server.harbor.tools import TOOLS

SCHEMA = {"name": "echo", "description": "Say it back.", "inputSchema": {"type": "object"}}


class Container(Sandbox):
    """A sandbox with no env process; `stopped` says why its stream ended, once it has."""

    def __init__(self, stopped: str | None = None):
        self.stopped = stopped
        self.closed = False
        self.execs: list[Sequence[str]] = []

    async def send_line(self, line: bytes) -> None:
        raise AssertionError("nothing is encoded for an in-process env")

    async def read_line(self) -> bytes:
        raise EOFError(self.stopped or "closed")

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return f"the container exceeded its memory limit ({self.stopped})" if self.stopped else ""

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        raise AssertionError("not verified here")

    async def exec(self, command: Sequence[str], *, stdin: bool = False) -> SandboxProcess:
        self.execs.append(command)
        raise SandboxError("the container is not running")

    async def close(self) -> None:
        self.closed = True

    @property
    def alive(self) -> bool:
        return self.stopped is None


class Tools:
    """Served tools: `echo` answers its text; `fail` fails as the agent's mistake; `gone` finds
    the sandbox gone; `wait` never answers. `runs` counts the calls that reached them."""

    def __init__(self) -> None:
        self.runs = 0

    def schemas(self) -> list[dict[str, Any]]:
        return [SCHEMA]

    async def run(self, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
        self.runs += 1
        if name == "gone":
            raise SandboxError("the exec failed: no such container")
        if name == "wait":
            await asyncio.Event().wait()
        if name == "fail":
            return "no such file: /nope", "execution_error"
        return arguments["text"], None


def test_a_tool_answer_reaches_the_episode_as_its_text_and_a_failure_as_its_kind():
    connection = InProcessConnection(Container(), Tools())

    async def calls() -> list[Any]:
        await connection.initialize()
        return [
            await connection.list_tools(),
            await connection.call_tool("echo", {"text": "hi"}),
            await connection.call_tool("fail", {}),
        ]

    listed, answered, failed = asyncio.run(calls())
    assert listed == [SCHEMA]
    assert tool_answer("echo", answered, 1000).result == "hi"
    error = tool_answer("fail", failed, 1000).error
    assert error is not None and (error.error_type, error.message) == ("execution_error", "no such file: /nope")
    assert connection.idle


def test_it_answers_no_hook_and_runs_nothing_for_one():
    tools = Tools()
    connection = InProcessConnection(Container(), tools)
    assert asyncio.run(connection.hook("corral/reset", {"task": {}})) is None
    assert asyncio.run(connection.hook("corral/report")) is None
    assert tools.runs == 0


def test_a_sandbox_that_stopped_says_why_and_every_later_call_is_refused_without_running():
    tools = Tools()
    connection = InProcessConnection(Container(stopped="exit 137"), tools)

    with pytest.raises(
        EnvDied, match=r"the env's sandbox stopped: the container exceeded its memory limit \(exit 137\)"
    ):
        asyncio.run(connection.call_tool("gone", {}))
    with pytest.raises(EnvDied, match="memory limit"):
        asyncio.run(connection.call_tool("echo", {"text": "hi"}))
    assert tools.runs == 1


def test_a_sandbox_still_running_is_gone_for_the_reason_its_exec_gave():
    with pytest.raises(EnvDied, match="the env's sandbox stopped: the exec failed: no such container"):
        asyncio.run(InProcessConnection(Container(), Tools()).call_tool("gone", {}))


def test_a_call_given_up_at_its_deadline_leaves_the_env_busy():
    connection = InProcessConnection(Container(), Tools())

    async def cut_short() -> None:
        async with asyncio.timeout(0.05):
            await connection.call_tool("wait", {})

    with pytest.raises(TimeoutError):
        asyncio.run(cut_short())
    assert not connection.idle  # what it started may still run in the sandbox: no report is asked


def test_closing_it_closes_the_sandbox():
    sandbox = Container()
    asyncio.run(InProcessConnection(sandbox, Tools()).close())
    assert sandbox.closed


def test_a_harbor_task_s_terminal_tools_are_served_in_process_for_its_container():
    container = Container()
    connection = connect(container)

    async def calls() -> list[Any]:
        return [
            await connection.list_tools(),
            await connection.call_tool("bash", {"command": 3}),
            await connection.call_tool("ls", {}),
        ]

    listed, wrong, unknown = asyncio.run(calls())
    assert [tool["name"] for tool in listed] == list(TOOLS)
    assert tool_answer("bash", wrong, 1000).error.error_type == "invalid_args"  # type: ignore[union-attr]
    assert tool_answer("ls", unknown, 1000).error.error_type == "tool_not_found"  # type: ignore[union-attr]
    assert container.execs == []  # refused before anything ran in the container
    with pytest.raises(EnvDied, match="the container is not running"):
        asyncio.run(connection.call_tool("bash", {"command": "true"}))
