"""A plain MCP stdio server as a bundle's env (`command = [...]` in env.toml): its tools are
served, corral's hooks are not called since it does not declare them, and it gets MCP's
handshake by the book. Servers written with the official SDKs (mcp 1.x's FastMCP, fastmcp
3.x, mcp 2.x's MCPServer) play whole episodes, though they answer unknown methods with
-32602, send their own requests and notifications, and let a tool's print reach stdout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.client import Bundle
from tests.conftest import skip_or_fail_under_ci

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")

# An MCP server with one tool and none of corral's hooks. It refuses a client that sends
# anything before it has answered `initialize`, as MCP asks clients not to.
ECHO_SERVER = """\
import json, os, select, sys

def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()

TOOL = {"name": "echo", "description": "Echo a text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "description": "what to echo"}},
                        "required": ["text"]}}
# Unbuffered reads, so that whatever the client sent beyond its first line shows.
lines = os.read(0, 1 << 20).splitlines()
if len(lines) > 1 or select.select([0], [], [], 0.2)[0]:
    sys.exit("a request came before the initialize reply")
first = json.loads(lines[0])
assert first["method"] == "initialize", first
send({"jsonrpc": "2.0", "id": first["id"], "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
      "serverInfo": {"name": "echo", "version": "1"}}})
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "tools/list":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [TOOL]}})
    elif message["method"] == "tools/call":
        text = message["params"]["arguments"].get("text")
        if isinstance(text, str):
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": text}]}})
        else:  # as MCP SDKs answer arguments that do not fit the schema
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "text: not a string"}})
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "method not found"}})
"""


@pytest.fixture
def echo_bundle(tmp_path: Path) -> Path:
    files = {
        "bundle.toml": 'name = "echo"\ndescription = "A plain MCP server as an env."\nversion = "1.0.0"\n',
        "envs/echo/env.toml": 'command = ["python3", "-m", "echo_server"]\n',
        "envs/echo/echo_server.py": ECHO_SERVER,
        "verifiers/no_report.py": "def verify(task, report):\n    return 1.0 if report == {} else 0.0\n",
        "tasks/echo-hi.json": json.dumps({"env": "echo", "prompt": "Echo hi.", "verifiers": {"done": "no_report"}}),
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path


def test_a_plain_mcp_server_plays_a_whole_episode(serve, echo_bundle):
    server = serve(echo_bundle)
    with Bundle(server.url) as bundle:
        environment = bundle.factory()
        environment.reset(**bundle.dataset[0])

        refused = environment.echo(text=42)  # the env's JSON-RPC error: an answer the model reads, not the end
        echoed = environment.echo(text="hi")
        environment.end_turn(response="done")

        assert refused == "tools/call failed in the env: text: not a string"
        assert (echoed, environment.get_reward()) == ("hi", 1.0)


# One calculator, written with each SDK. `add` prints (mcp 1.x and fastmcp 3.x let that reach
# stdout); `pinged` logs (a notification) and pings its client a few times before it answers:
# requests numbered 0, 1, 2... or 1, 2, 3..., ids that a client counting its own calls the
# same way would take for replies.
SDK_SERVER = '''\
import os

os.environ["FASTMCP_SHOW_SERVER_BANNER"] = "false"  # fastmcp 3.x: no banner,
os.environ["FASTMCP_CHECK_FOR_UPDATES"] = "off"  # and no PyPI request at start

__IMPORT__

mcp = __SERVER__("calculator")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    print("adding", a, "and", b)
    return a + b


@mcp.tool()
async def pinged(ctx: Context) -> str:
    """Ping the client, then answer."""
    await ctx.info("about to ping the client")
    for _ in range(4):
        await ctx.session.send_ping()
    return "pong"


if __name__ == "__main__":
    mcp.run()
'''

SDKS = {
    "mcp1-FastMCP": ("from mcp.server.fastmcp import Context, FastMCP", "FastMCP"),
    "fastmcp3-FastMCP": ("from fastmcp import Context, FastMCP", "FastMCP"),
    "mcp2-MCPServer": ("from mcp.server.mcpserver import Context, MCPServer", "MCPServer"),
}
MCP2 = "mcp==2.3.0"


@pytest.fixture(scope="session")
def mcp2_python() -> str:
    """The Python of a virtual environment with mcp 2.x, built once and kept in
    ~/.cache/corral-tests/, keyed by the pin and this Python's version. Where it cannot be
    built the test skips, except under CI=true, where it fails: a skip there would hide it."""
    key = f"{MCP2.replace('==', '-')}-py{sys.version_info.major}.{sys.version_info.minor}"
    venv = Path.home() / ".cache" / "corral-tests" / key
    python = venv / "bin" / "python"
    if (venv / "complete").exists():
        return str(python)
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", MCP2],
            check=True,
            capture_output=True,
            timeout=240,
        )
    except (OSError, subprocess.SubprocessError) as error:
        output = getattr(error, "stderr", b"") or b""
        skip_or_fail_under_ci(f"could not build a venv with {MCP2} in {venv}: {error}\n{output.decode()[-2000:]}")
    (venv / "complete").touch()
    return str(python)


@pytest.fixture(params=list(SDKS))
def sdk_bundle(request, tmp_path: Path) -> Path:
    """A bundle whose env is the calculator written with one SDK; two tasks, scored 1 and 0."""
    imports, server_class = SDKS[request.param]
    python = request.getfixturevalue("mcp2_python") if "mcp2" in request.param else sys.executable
    source = SDK_SERVER.replace("__IMPORT__", imports).replace("__SERVER__", server_class)
    files = {
        "bundle.toml": 'name = "calculator"\ndescription = "An SDK\'s MCP server."\nversion = "1.0.0"\n',
        "envs/calculator/env.toml": f"command = {json.dumps([python, '-m', 'calculator'])}\n",
        "envs/calculator/calculator.py": source,
        # With no report hook the report is {}: the verifier is all that scores the episode.
        "verifiers/full.py": "def verify(task, report):\n    return 1.0 if report == {} else 0.5\n",
        "verifiers/nothing.py": "def verify(task, report):\n    return 0.0\n",
        "tasks/add-full.json": json.dumps({"env": "calculator", "prompt": "Add.", "verifiers": {"v": "full"}}),
        "tasks/add-nothing.json": json.dumps({"env": "calculator", "prompt": "Add.", "verifiers": {"v": "nothing"}}),
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path


@pytest.fixture
def envs_as_the_server_s_user(monkeypatch):
    """The SDKs are in this test's virtualenvs, whose interpreter may sit where only the
    server's user can run it (pyenv under /root); a server running as root would run each
    local env as a uid of its own (docs/sandboxes.md), which could not start it."""
    monkeypatch.setattr("corral.sandboxes.local.procs.running_as_root", lambda: False)


@pytest.mark.usefixtures("envs_as_the_server_s_user")
def test_a_server_written_with_an_mcp_sdk_plays_episodes_scored_by_the_verifiers(serve, sdk_bundle):
    server = serve(sdk_bundle)
    with Bundle(server.url) as bundle:
        rows = {row["task_id"]: row for row in bundle.dataset}
        played = {}
        for task_id in ("add-full", "add-nothing"):
            environment = bundle.factory()
            environment.reset(**rows[task_id])
            answers = (environment.add(a=2, b=3), environment.pinged(), environment.add(a=40, b=2))
            environment.end_turn(response="5")
            played[task_id] = (answers, environment.get_reward())

    assert played == {
        "add-full": (("5", "pong", "42"), 1.0),
        "add-nothing": (("5", "pong", "42"), 0.0),
    }
