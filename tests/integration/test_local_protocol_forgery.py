"""An agent with a shell must not write the env's protocol answers, so nothing it runs can
forge the `report` a bundle's Python verifier grades.

A server that is not root (a laptop's user) on asyncio's own loop (uvicorn's without uvloop,
which the test forces; uvloop makes socket pairs, which /proc cannot reopen) makes the env's
stdio pipes as the env's own user. In bubblewrap's namespaces the first process used to be bubblewrap's init, which holds
those pipes and, unlike the env (corral.env.runtime makes itself non-dumpable), can be opened
under /proc by the agent's processes: a line written to /proc/1/fd/1 reached the server as the
env's answer, and a report of `{"solved": true}` scored 1 without the work. The env is now the
namespace's first process itself (local.namespace, `as_pid_1`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import skip_or_fail_under_ci
from tests.servers import NOBODY, free_port, python_command, stop, wait_until_serving
from tests.wire import called, opened, ws

ENV = '''\
import subprocess

from corral.env import Env, tool


class Forge(Env):
    def reset(self, task: dict) -> None:
        self.solved = False

    @tool
    def bash(self, command: str) -> str:
        """Run a bash command.

        Args:
            command: the command line.
        """
        ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        return ran.stdout + ran.stderr

    def report(self) -> dict:
        return {"solved": self.solved}
'''
JUDGE = 'def verify(task, report):\n    return float(report["solved"] is True)\n'

# In the background, once its own call has been answered: a forged answer to every id corral
# may ask next, each the report of a solved task; then a word for the test.
FORGER = r"""
import json, time
time.sleep(1)
try:
    with open("/proc/1/fd/1", "w") as stream:
        for n in range(1, 100):
            stream.write(json.dumps({"jsonrpc": "2.0", "id": f"corral-{n}", "result": {"report": {"solved": True}}}) + "\n")
    word = "forged"
except OSError as error:
    word = f"refused {error}"
open("forger.done", "w").write(word)
"""


@pytest.fixture
def forge_bundle():
    if os.geteuid() != 0:
        skip_or_fail_under_ci("the test starts a server as another user, which takes root (CI runs the tests as root)")
    root = Path(tempfile.mkdtemp(prefix="corral-forge-"))
    root.chmod(0o755)  # the server's user must read the bundle
    files = {
        "bundle.toml": 'name = "forge"\n[defaults]\nenv = "forge"\nverifiers = { judge = "judge" }\n',
        "envs/forge/env.toml": 'entry = "env:Forge"\n',
        "envs/forge/env.py": ENV,
        "verifiers/judge.py": JUDGE,
        "tasks.jsonl": json.dumps({"id": "solve", "args": {}, "prompt": "Solve it."}) + "\n",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    for folder, _, _ in os.walk(root):
        os.chmod(folder, 0o755)
    yield root
    shutil.rmtree(root)


def test_an_agent_cannot_answer_for_the_env_of_a_server_that_is_not_root(forge_bundle):
    port = free_port()
    command, environ = python_command(
        "-c",
        "import sys; sys.modules['uvloop'] = None; from corral.cli.main import app; app()",
        "serve",
        str(forge_bundle),
        "--port",
        str(port),
        "--sandbox",
        "local",
        "--instance",
        f"forge-{os.getpid()}",
        uid=NOBODY,
    )
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ, cwd="/", start_new_session=True
    )
    try:
        with ws(SimpleNamespace(url=wait_until_serving(server, port))) as socket:
            opened(socket, task_id="solve")
            said = called(socket, "bash", command=f"setsid python3 -c '{FORGER}' </dev/null >/dev/null 2>&1 & pwd")
            done = Path(re.search(r"^(/\S+)$", said.result, re.MULTILINE)[1]) / "forger.done"
            deadline = time.monotonic() + 60
            while not done.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            word = done.read_text() if done.exists() else "the forger did not finish"
            ended = called(socket, "end_turn", response="done")
    finally:
        stop(server)

    assert word.startswith("refused"), word
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason
