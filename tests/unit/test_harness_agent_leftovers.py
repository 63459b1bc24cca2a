"""What a harness agent starts does not outlive its run: a process it detached into a session
of its own (`setsid`, out of the agent's process group) is killed with the rest, before the
verifiers read what the agent left."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

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


# corral's runtime, as the sandbox runs it: a process of its own, which run_agent makes the
# subreaper of what the agent leaves (never the test's process, whose other children it would reap).
RUNTIME = """
import json, socket, sys
from corral.env.harness import run_agent
folder, pid_file = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX)
server.bind(folder + "/model.sock")
command = [sys.executable, "-c", sys.argv[3], pid_file]
ended = run_agent({"command": command, "environment": {}, "socket": folder + "/model.sock", "port": 0, "timeout_s": 10})
print(json.dumps(ended["exit_code"]))
"""


def test_a_detached_child_of_the_agent_is_killed_when_its_run_ends(tmp_path: Path):
    pid_file = tmp_path / "pid"
    runtime = subprocess.run(
        [sys.executable, "-c", RUNTIME, str(tmp_path), str(pid_file), DETACH],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert runtime.stdout.strip() == "0", runtime.stderr
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
