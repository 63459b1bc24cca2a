"""The server's client of an env process (`EnvProcess`), against scripted envs that behave as
the MCP SDKs' servers do: they send their own requests and notifications, print on stdout,
and answer methods they do not know with -32602."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from corral.env import jsonrpc
from corral.errors import CorralError, SandboxError
from corral.server.connection.base import EnvCallError, EnvDied
from corral.server.connection.stdio import EnvProcess

EOF = object()
Script = Callable[[dict], list[Any]]


class ScriptedEnv:
    """The stdio stream of an env process, played in-process: `script(message)` gives what the
    env writes back to each message corral sends (a dict as a JSON-RPC line, bytes as a raw
    line, EOF to close its stdout)."""

    def __init__(self, script: Script, stderr: str = ""):
        self.received: list[dict] = []
        self._script = script
        self._stdout: asyncio.Queue = asyncio.Queue()
        self._stderr = stderr

    async def send_line(self, line: bytes) -> None:
        message = json.loads(line)
        self.received.append(message)
        for out in self._script(message):
            self._stdout.put_nowait(out)

    async def read_line(self) -> bytes:
        out = await self._stdout.get()
        if out is EOF:
            raise EOFError("the env process closed its stdout")
        return out if isinstance(out, bytes) else json.dumps(out).encode()

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return self._stderr[-max_chars:]

    def methods(self) -> list[str]:
        return [m["method"] for m in self.received if "method" in m]


def text(value: str) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def plain_mcp_server(capabilities: dict | None = None, on_call: Script | None = None) -> Script:
    """A script for an MCP server without corral's hooks, as mcp 1.x's FastMCP answers: an
    unknown method gets -32602, not -32601."""

    def script(message: dict) -> list[Any]:
        method = message.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities or {"experimental": {}, "tools": {}},
                "serverInfo": {"name": "demo", "version": "1.30.0"},
            }
            return [jsonrpc.result(message["id"], result)]
        if method == "tools/call" and on_call is None:
            return [jsonrpc.result(message["id"], text("5"))]
        if method is None or method == "tools/call":
            return on_call(message) if on_call else []
        if "id" not in message:
            return []
        return [jsonrpc.error(message["id"], -32602, "Invalid request parameters", "")]

    return script


def play(script: Script, steps: Callable, stderr: str = "", corral_runtime: bool = False) -> ScriptedEnv:
    """Run `steps(process)` against a scripted env; return the env to inspect what it got."""

    async def main() -> ScriptedEnv:
        env = ScriptedEnv(script, stderr)
        async with asyncio.timeout(5):  # a client that waits for the wrong thing waits forever
            await steps(EnvProcess(env, corral_runtime=corral_runtime))
        return env

    return asyncio.run(main())


def test_a_ping_from_the_env_with_the_call_s_own_id_is_answered_not_taken_as_the_reply():
    def on_call(message: dict) -> list[Any]:
        if message.get("method") == "tools/call":  # the tool pings its client first
            return [{"jsonrpc": "2.0", "id": message["id"], "method": "ping"}]
        return [jsonrpc.result(message["id"], text("pong"))]  # corral answered: the tool ends

    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.call("tools/call", {"name": "pinged", "arguments": {}}))

    env = play(plain_mcp_server(on_call=on_call), steps)

    call_id = env.received[2]["id"]
    assert results == [text("pong")]
    assert env.received[3] == {"jsonrpc": "2.0", "id": call_id, "result": {}}


def test_requests_from_the_env_get_pong_for_ping_and_method_not_found_for_the_rest():
    calls: list[dict] = []
    answered: list[dict] = []

    def on_call(message: dict) -> list[Any]:
        if message.get("method") == "tools/call":  # ids from 0, as mcp 1.x numbers its own
            calls.append(message)
            return [
                {"jsonrpc": "2.0", "id": 0, "method": "ping"},
                {"jsonrpc": "2.0", "id": 1, "method": "roots/list"},
            ]
        answered.append(message)
        return [jsonrpc.result(calls[0]["id"], text("done"))] if len(answered) == 2 else []

    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.call("tools/call", {"name": "ask", "arguments": {}}))

    play(plain_mcp_server(on_call=on_call), steps)

    assert results == [text("done")]
    assert answered[0] == {"jsonrpc": "2.0", "id": 0, "result": {}}
    assert answered[1]["id"] == 1
    assert answered[1]["error"]["code"] == -32601


def test_notifications_stray_prints_and_late_replies_are_skipped():
    def on_call(message: dict) -> list[Any]:
        return [
            b"stray print from tool",
            jsonrpc.notification("notifications/message", {"level": "info", "data": "hi"}),
            jsonrpc.notification("notifications/progress", {"progressToken": 1, "progress": 1}),
            jsonrpc.result("corral-0", text("a reply to a call given up on")),
            b"",
            jsonrpc.result(message["id"], text("5")),
        ]

    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.call("tools/call", {"name": "add", "arguments": {}}))
        results.append(process.skipped_lines)

    play(plain_mcp_server(on_call=on_call), steps)

    assert results == [text("5"), 2]


def test_a_dead_env_is_env_died_with_its_stderr_and_the_last_line_that_was_not_json_rpc():
    def on_call(message: dict) -> list[Any]:
        return [b"about to fail", EOF]

    caught: list[BaseException] = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        try:
            await process.call("tools/call", {"name": "add", "arguments": {}})
        except EnvDied as error:
            caught.append(error)

    play(plain_mcp_server(on_call=on_call), steps, stderr="MemoryError: out of memory\n")

    [error] = caught
    assert isinstance(error, SandboxError) and isinstance(error, CorralError)
    assert str(error) == (
        "the env process closed its stdout; the env's stderr ends with:\n"
        "MemoryError: out of memory\n"
        "(it also wrote 1 line(s) on stdout that are not JSON-RPC; the last: 'about to fail')"
    )


@pytest.mark.parametrize(
    "capabilities",
    [
        {"experimental": {}, "tools": {"listChanged": False}},  # mcp 1.x FastMCP
        {"tools": {"listChanged": False}},  # mcp 2.x MCPServer
        {"experimental": {"corral": "yes"}, "tools": {}},  # not a declaration corral reads
    ],
    ids=["mcp1", "mcp2", "malformed"],
)
def test_hooks_are_not_sent_to_a_server_that_does_not_declare_them(capabilities):
    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.hook("corral/reset", {"task": {"day": 1}}))
        results.append(await process.hook("corral/end_turn", {"response": "done"}))
        results.append(await process.hook("corral/report"))
        with pytest.raises(EnvCallError) as caught:  # what the server says to one it does not know
            await process.call("corral/reset", {"task": {}})
        results.append(caught.value.code)

    env = play(plain_mcp_server(capabilities), steps)

    assert results == [None, None, None, -32602]
    assert env.methods() == ["initialize", "notifications/initialized", "corral/reset"]


def test_the_hooks_a_server_declares_are_the_ones_called():
    def on_call(message: dict) -> list[Any]:
        return [jsonrpc.result(message["id"], {})]

    capabilities = {"tools": {}, "experimental": {"corral": {"hooks": ["corral/reset"]}}}
    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.hook("corral/reset", {"task": {"day": 1}}))
        results.append(await process.hook("corral/report"))

    script = plain_mcp_server(capabilities)
    env = play(lambda m: on_call(m) if m.get("method") == "corral/reset" else script(m), steps)

    assert results == [{}, None]
    assert env.methods() == ["initialize", "notifications/initialized", "corral/reset"]


def test_corral_s_runtime_gets_the_handshake_and_reset_without_waiting_in_between():
    pending: list[dict] = []

    def runtime(message: dict) -> list[Any]:
        # Holds its initialize reply back until the next request, which a client that waited
        # for it would never send.
        if message["method"] == "initialize":
            pending.append(message)
            return []
        if message["method"] == "corral/reset":
            return [
                jsonrpc.result(pending[0]["id"], {"protocolVersion": "2025-06-18"}),
                jsonrpc.result(message["id"], {}),
            ]
        return []

    results = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        results.append(await process.hook("corral/reset", {"task": {"day": 1}}))
        results.append(sorted(process.hooks))

    env = play(runtime, steps, corral_runtime=True)

    assert results == [{}, ["corral/end_turn", "corral/report", "corral/reset", "corral/run_agent"]]
    assert env.methods() == ["initialize", "notifications/initialized", "corral/reset"]


def test_requests_carry_string_ids_that_never_repeat():
    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        for _ in range(3):
            await process.call("tools/call", {"name": "add", "arguments": {}})

    env = play(plain_mcp_server(), steps)

    ids = [m["id"] for m in env.received if "method" in m and "id" in m]
    assert ids == ["corral-1", "corral-2", "corral-3", "corral-4"]


def test_an_error_reply_is_env_call_error_with_the_env_s_code_and_message():
    def on_call(message: dict) -> list[Any]:
        return [jsonrpc.error(message["id"], -32000, "KeyError: 'day'")]

    caught: list[EnvCallError] = []

    async def steps(process: EnvProcess) -> None:
        await process.initialize()
        try:
            await process.call("tools/call", {"name": "add", "arguments": {}})
        except EnvCallError as error:
            caught.append(error)

    play(plain_mcp_server(on_call=on_call), steps)

    [error] = caught
    assert isinstance(error, CorralError)
    assert (error.code, str(error)) == (-32000, "tools/call failed in the env: KeyError: 'day'")
