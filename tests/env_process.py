"""The env runtime (`python -m corral.env MODULE:CLASS`) as a child process, spoken to one
JSON-RPC line at a time as the server speaks to it, and an env for it to run."""

import json
import os
import select
import subprocess
import sys
from pathlib import Path

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
