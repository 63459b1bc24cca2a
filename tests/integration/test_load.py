"""Load, bounded and on loopback: bench/load.py against a `corral serve` of its own (local
sandbox). 64 sessions play for 30 s with every reward checked, then 512 sessions are opened
at once (each handshake within a client's 10 s), held together and scored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import REPO

# Well inside pytest's 300 s a test (pyproject.toml), so that this deadline is the one that
# fires and what the run started is stopped before the failure is reported.
RUN_LIMIT_S = 220


def run_in_own_group(command: list[str], limit_s: float) -> subprocess.CompletedProcess:
    """Run `command` in a process group of its own; past `limit_s` stop the whole group (the
    bench's server and its 512 episodes too, which would otherwise load the machine while
    the failure is reported and the next tests run)."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        raise AssertionError(f"bench/load.py ran past {limit_s}s; its last output: {stderr[-2000:]}") from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_64_sessions_for_half_a_minute_then_512_at_once_all_served_right():
    run = run_in_own_group(
        [
            sys.executable,
            str(REPO / "bench" / "load.py"),
            "--json",
            "--sessions",
            "64",
            "--seconds",
            "30",
            "--burst",
            "512",
        ],
        RUN_LIMIT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    (sustained,), burst = report["sustained"]["current"], report["burst"]  # one session count, this tree's code
    assert (sustained["errors"], sustained["wrong_rewards"]) == (0, 0), sustained
    assert sustained["episodes"] >= 64  # every session played; each reward was the word's
    assert (burst["held"], burst["episodes"], burst["errors"], burst["wrong_rewards"]) == (512, 512, 0, 0), burst
    idle, after = report["idle"], report["after_burst"]
    assert after["fds"] <= idle["fds"] + 16, report  # every socket and pipe of the burst was closed
    assert after["rss_mb"] < idle["rss_mb"] + 150, report
