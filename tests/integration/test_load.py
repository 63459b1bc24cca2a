"""Load, bounded and on loopback: bench/load.py against a `corral serve` of its own (local
sandbox). 64 sessions play for 60 s with every reward checked, then 512 sessions are opened
at once (each handshake within a client's 10 s), held together and scored."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_64_sessions_for_a_minute_then_512_at_once_all_served_right():
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "load.py"), "--json", "--sessions", "64", "--seconds", "60",
         "--burst", "512"],
        # within pytest's 300 s a test (pyproject.toml): this limit is the one that fires
        capture_output=True, text=True, timeout=280, check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    sustained, burst = report["sustained"], report["burst"]
    assert (sustained["errors"], sustained["wrong_rewards"]) == (0, 0), sustained
    assert sustained["episodes"] >= 64  # every session played; each reward was the word's
    assert (burst["held"], burst["episodes"], burst["errors"], burst["wrong_rewards"]) == (512, 512, 0, 0), burst
    idle, after = report["idle"], report["after_burst"]
    assert after["fds"] <= idle["fds"] + 16, report  # every socket and pipe of the burst was closed
    assert after["rss_mb"] < idle["rss_mb"] + 150, report
