"""A plain MCP stdio server as a bundle's env (`command = [...]` in env.toml): its tools are
served, corral's missing hooks count as no-ops, and it gets MCP's handshake by the book."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.client import Bundle

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")

# An MCP server with one tool and none of corral's hooks. It refuses a client that sends
# anything before it has answered `initialize`, as MCP asks clients not to.
ECHO_SERVER = '''\
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
        text = message["params"]["arguments"]["text"]
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "method not found"}})
'''


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

        echoed = environment.echo(text="hi")
        environment.end_turn(response="done")

        assert (echoed, environment.get_reward()) == ("hi", 1.0)
