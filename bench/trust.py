"""The cost of trust: shellfix's reset and end-of-episode verification, before and after.

    python bench/trust.py                         # against the commit before issue 21's work
    python bench/trust.py --before REV --episodes 30 --sandbox docker

Two servers of bundles/shellfix run side by side, one from this tree and one from `--before`
(checked out in a temporary git worktree), on the same sandbox kind; the same episodes are
played on each in turn (reset, the reference fix, end_turn), so both see the same machine at
the same moments. For each server it prints the reset's p50 and the end_turn's p50 and p99
(the env's reply and every verifier: for shellfix, its hidden tests in a fresh copy of the
repository), and the after/before ratios. Run it with a Docker engine for `--sandbox docker`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corral.client import Bundle

from common import free_port, start_server

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("protocol", "client", "server", "sandboxes", "training")
BEFORE = "6af8799"  # main before issue 21's endings, pristine verifier and env boundary
TASK = "shellfix-median"


def serve(tree: Path, sandbox: str) -> tuple[subprocess.Popen, str]:
    """`corral serve bundles/shellfix` from `tree`'s source, on a free port."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / root) for root in SOURCE_ROOTS)}
    command = [
        sys.executable,
        "-c",
        "from corral.cli.main import main; main()",
        "serve",
        str(tree / "bundles" / "shellfix"),
        "--sandbox",
        sandbox,
        "--port",
        str(port),
        "--max-concurrent-envs",
        "2",
    ]
    return start_server(command, port, f"corral from {tree}", env=env)


def play(url: str, fix: dict[str, str]) -> tuple[float, float, float | None]:
    """One episode of TASK with the reference fix: (reset seconds, end_turn seconds, reward)."""
    with Bundle(url, split="all") as bundle:
        environment = bundle.factory()
        began = time.perf_counter()
        environment.reset(task_id=TASK)
        reset = time.perf_counter() - began
        environment.replace_in_file(**fix)
        began = time.perf_counter()
        reward = environment.get_reward()
        return reset, time.perf_counter() - began, reward


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with (default: %(default)s)")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per server (default: %(default)s)")
    parser.add_argument(
        "--sandbox", choices=["local", "docker"], action="append", help="repeatable; default: local and docker"
    )
    args = parser.parse_args()
    fix = json.loads((ROOT / "bundles" / "shellfix" / "solutions" / f"{TASK}.json").read_text())
    with tempfile.TemporaryDirectory(prefix="corral-before-") as scratch:
        before_tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before_tree), args.before], check=True
        )
        try:
            for sandbox in args.sandbox or ["local", "docker"]:
                compare(sandbox, {"before": before_tree, "after": ROOT}, fix, args.episodes)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before_tree)], check=False)


def compare(sandbox: str, trees: dict[str, Path], fix: dict[str, str], episodes: int) -> None:
    servers = {name: serve(tree, sandbox) for name, tree in trees.items()}
    timings: dict[str, dict[str, list[float]]] = {name: {"reset": [], "end_turn": []} for name in trees}
    try:
        for name, (_, url) in servers.items():
            play(url, fix)  # warm: images, verifier workers, caches
        for _ in range(episodes):
            for name, (_, url) in servers.items():
                reset, end_turn, reward = play(url, fix)
                assert reward == 1.0, f"{name}: the reference fix scored {reward}"
                timings[name]["reset"].append(reset)
                timings[name]["end_turn"].append(end_turn)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(30)
    print(f"\nshellfix on {sandbox}, {episodes} episodes each, side by side (seconds)")
    print(f"{'':8} {'reset p50':>10} {'verify p50':>11} {'verify p99':>11}")
    rows = {
        name: (statistics.median(t["reset"]), statistics.median(t["end_turn"]), p99(t["end_turn"]))
        for name, t in timings.items()
    }
    for name, row in rows.items():
        print(f"{name:8} {row[0]:10.3f} {row[1]:11.3f} {row[2]:11.3f}")
    ratios = [after / before for after, before in zip(rows["after"], rows["before"], strict=True)]
    print(f"{'ratio':8} {ratios[0]:9.2f}x {ratios[1]:10.2f}x {ratios[2]:10.2f}x")


if __name__ == "__main__":
    main()
