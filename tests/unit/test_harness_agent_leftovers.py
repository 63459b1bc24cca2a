"""What a harness agent starts does not outlive its run: a process it detached into a session
of its own (`setsid`, out of the agent's process group) is killed with the rest, before the
verifiers read what the agent left."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from corral.env.harness import run_agent

# The agent's detached child: its own session, its pid written, then it would forge its result late.
DETACH = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(30)
    os._exit(0)
time.sleep(0.5)
"""


def test_a_detached_child_of_the_agent_is_killed_when_its_run_ends(tmp_path: Path):
    pid_file = tmp_path / "pid"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "model.sock"))
    ended = run_agent(
        {
            "command": [sys.executable, "-c", DETACH, str(pid_file)],
            "environment": {},
            "socket": str(tmp_path / "model.sock"),
            "port": 0,
            "timeout_s": 10,
        }
    )
    assert ended["exit_code"] == 0
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the agent's detached child outlived its run"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits to be read
