"""The agent cannot reach into its env process: not to trace it, nor to read its memory,
environment, address map or descriptors (local sandbox; the docker sandbox's env is the same
runtime).

The bundle here gives the agent a shell beside an env whose report a Python verifier grades:
an agent that could trace the env, or open its descriptors, could make it report anything.
Each attack is made in the agent's shell (a child of the env, of the env's user) and must fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import serving
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")

ENV = '''\
import subprocess

from corral.env import Env, tool


class ShellReport(Env):
    def reset(self, task: dict) -> None:
        self.word = ""

    @tool
    def say(self, word: str) -> str:
        """Say a word: apple scores 1.

        Args:
            word: the word.
        """
        self.word = word
        return "ok"

    @tool
    def bash(self, command: str) -> str:
        """Run a shell command.

        Args:
            command: the command line.
        """
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    def report(self) -> dict:
        return {"word": self.word}
'''
JUDGE = "def verify(task, report):\n    return float(report.get('word') == 'apple')\n"

# The env's process: the first ancestor of the agent's shell running corral's env runtime.
FIND_ENV = """
import os
def env_pid():
    pid = os.getpid()
    while pid > 1:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        if "corral.env" in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\\0"):
            return pid
    raise SystemExit("no env process above this one")
env = env_pid()
"""
PTRACE = (
    FIND_ENV
    + """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("attached" if libc.ptrace(16, env, None, None) == 0 else f"refused {ctypes.get_errno()}")
"""
)
READ_MEMORY = (
    FIND_ENV
    + """
for what in ("environ", "mem", "maps", "fd"):
    try:
        (os.listdir if what == "fd" else lambda p: open(p, "rb").read(1))(f"/proc/{env}/{what}")
        print(what, "read")
    except OSError as error:
        print(what, "refused", error.errno)
"""
)


@pytest.fixture(scope="module")
def shellreport(tmp_path_factory) -> Iterator[object]:
    bundle = tmp_path_factory.mktemp("boundary") / "shellreport"
    files = {
        "bundle.toml": 'name = "shellreport"\n[defaults]\nenv = "shell"\nverifiers = { judge = "judge" }\n',
        "envs/shell/env.toml": 'entry = "env:ShellReport"\n',
        "envs/shell/env.py": ENV,
        "verifiers/judge.py": JUDGE,
        "tasks.jsonl": json.dumps({"id": "pear", "args": {}, "prompt": "Say pear."}) + "\n",
    }
    for relative, text in files.items():
        (bundle / relative).parent.mkdir(parents=True, exist_ok=True)
        (bundle / relative).write_text(text)
    yield from serving(bundle)


def python(code: str) -> str:
    return f"python3 - <<'PY'\n{code}\nPY"


def test_the_agent_can_neither_trace_the_env_nor_read_its_memory_environment_or_descriptors(shellreport):
    with ws(shellreport) as socket:
        opened(socket, task_id="pear")
        read = called(socket, "bash", command=python(READ_MEMORY)).answer
        traced = called(socket, "bash", command=python(PTRACE)).answer
        ended = called(socket, "end_turn", response="done")
    assert traced.startswith("refused"), traced
    assert read.split("\n")[:4] == [f"{what} refused 13" for what in ("environ", "mem", "maps", "fd")], read
    assert (ended.status, ended.reward) == ("scored", 0.0), ended
