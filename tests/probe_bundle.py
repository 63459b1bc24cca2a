"""A small bundle for the tests of how episodes end: an env whose tools and hooks misbehave on
request (hang, die, fill its folder, leave processes behind, raise) and a verifier that can hang
or raise. The agent asks for a misbehaviour through `say`; a task asks for it through its args,
so that it happens in an untouched episode of that task too (the platform's own fault). The
"rounds" task's env opens a new turn at every turn's end, until its 100-turn budget."""

from __future__ import annotations

import json
from pathlib import Path

PROBE_ENV = '''\
import os
import signal
import time

from corral.env import Env, tool


class Probe(Env):
    def reset(self, task: dict) -> None:
        time.sleep(task.get("reset_sleep", 0))
        if task.get("reset_raises"):
            raise RuntimeError("the reset broke on purpose")
        self.word = ""
        self.report_breaks = task.get("report") == "raise"
        self.rounds = task.get("rounds", False)

    @tool
    def say(self, word: str) -> str:
        """Say a word.

        Args:
            word: the word; the verifier hangs on "hang" and raises on "raise", the env's
                end_turn hangs on "stall" and its report raises on "unreportable".
        """
        self.word = word
        return "ok"

    @tool
    def echo(self, size: int) -> str:
        """Answer with `size` letters.

        Args:
            size: how many.
        """
        return "a" * (size // 2) + "b" * (size - size // 2)

    @tool
    def spin(self, seconds: float) -> str:
        """Work for `seconds` (a call the agent asked too much of).

        Args:
            seconds: how long.
        """
        time.sleep(seconds)
        return "done"

    @tool
    def fill(self, megabytes: int) -> str:
        """Write `megabytes` into the env's folder.

        Args:
            megabytes: how much.
        """
        with open("fill", "wb") as filling:
            for _ in range(megabytes):
                filling.write(b"\\0" * (1024 * 1024))
        return "filled"

    @tool
    def leave_running(self, count: int) -> str:
        """Start `count` background processes and leave them running.

        Args:
            count: how many.
        """
        import subprocess

        for _ in range(count):
            subprocess.Popen(["sleep", "3600"], start_new_session=True)
        return "left running"

    @tool
    def die(self, how: str) -> str:
        """End this env's process.

        Args:
            how: "exit" (os._exit) or "kill" (SIGKILL to itself).
        """
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)

    def end_turn(self, response: str) -> str | None:
        if self.word == "stall":
            time.sleep(60)
        return "Another round: say apple." if self.rounds else None

    def report(self) -> dict:
        if self.word == "unreportable" or self.report_breaks:
            raise RuntimeError("the report broke on purpose")
        return {"word": self.word}
'''

JUDGE = """\
import time


def verify(task, report):
    if "hang" in (report["word"], task["args"].get("judge")):
        time.sleep(3600)
    if "raise" in (report["word"], task["args"].get("judge")):
        raise RuntimeError("the judge broke on purpose")
    return float(report["word"] == "apple")
"""


def write_probe_bundle(root: Path) -> Path:
    bundle = root / "probe"
    tasks = [
        {"id": "plain", "args": {}, "prompt": "Say apple."},
        {"id": "slow-reset", "args": {"reset_sleep": 60}, "prompt": "Say apple."},
        {"id": "budget", "args": {}, "prompt": "Say apple, quickly.", "time_budget_s": 1.5, "failure_score": -1},
        {"id": "broken-reset", "args": {"reset_raises": True}, "prompt": "Say apple."},
        {"id": "broken-judge", "args": {"judge": "raise"}, "prompt": "Say apple."},
        {"id": "hung-judge", "args": {"judge": "hang"}, "prompt": "Say apple."},
        {"id": "broken-report", "args": {"report": "raise"}, "prompt": "Say apple."},
        # A game of 100 rounds that never ends by itself: the turn budget ends it.
        {"id": "rounds", "args": {"rounds": True}, "prompt": "Say apple.", "max_turns": 100, "failure_score": -1},
    ]
    files = {
        "bundle.toml": 'name = "probe"\n[defaults]\nenv = "probe"\nverifiers = { judge = "judge" }\n',
        "envs/probe/env.toml": 'entry = "env:Probe"\n',
        "envs/probe/env.py": PROBE_ENV,
        "verifiers/judge.py": JUDGE,
        "tasks.jsonl": "".join(json.dumps(task) + "\n" for task in tasks),
    }
    for relative, text in files.items():
        (bundle / relative).parent.mkdir(parents=True, exist_ok=True)
        (bundle / relative).write_text(text)
    return bundle
