"""The run index at scale: how long indexing N generated episodes takes, and how fast every list
the viewer shows answers once it is built (the median of repeated calls), and the run page's time
and size.

    python bench/view.py                   # 10,000 and 100,000 episodes
    python bench/view.py --episodes 5000

Episodes are written as a GRPO run would write them: a server's record and a trainer's rollout
(200 token ids) each, 8 per group, 64 per step, over 200 tasks.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.cli.viewer.pages import run_page
from corral.client import run_views
from corral.client.run_index import EpisodeFilter, RunIndex

GROUP, PER_STEP, TASKS = 8, 64, 200


def generate(root: Path, episodes: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    (root / "server").mkdir(parents=True)
    (root / "run").mkdir()
    with (
        open(root / "server" / "episodes-0000.jsonl", "w") as server,
        open(root / "run" / "rollouts-0000.jsonl", "w") as trainer,
    ):
        task = ""
        for n in range(episodes):
            step, group, member = n // PER_STEP, n % PER_STEP // GROUP, n % GROUP
            if member == 0:  # a group is one task's samples
                task = f"task-{rng.randrange(TASKS)}"
            reward = float(rng.random() < 0.4)
            server.write(
                json.dumps(
                    {
                        "episode_id": f"e{n}",
                        "run": "server",
                        "task_id": task,
                        "split": "train",
                        "status": "scored",
                        "cause": "scored",
                        "reward": reward,
                        "seconds": {"total": 3.0},
                        "calls": [{"tool": "submit", "arguments": {"x": 1}}],
                        "ended_at": n,
                    }
                )
                + "\n"
            )
            trainer.write(
                json.dumps(
                    {
                        "episode_id": f"e{n}",
                        "run": "run",
                        "task_id": task,
                        "step": step,
                        "group": group,
                        "group_index": member,
                        "policy_version": step,
                        "advantage": 0.0,
                        "reward": reward,
                        "completion_ids": list(range(200)),
                        "ended_at": n,
                    }
                )
                + "\n"
            )


def median_ms(call: Callable[[], object], times: int = 20) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def bench(episodes: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        generate(root, episodes)
        index = RunIndex(root)
        started = time.perf_counter()
        index.refresh()
        print(f"{episodes:>7} episodes: index built in {time.perf_counter() - started:.2f} s")
        middle = episodes // PER_STEP // 2
        lists = {
            "runs": lambda: run_views.runs(index),
            "steps of a run": lambda: run_views.steps(index, "run"),
            "tasks x steps heatmap": lambda: run_views.heatmap(index, "run"),
            "groups of a step": lambda: run_views.groups(index, "run", middle),
            "episodes, filtered (task, steps)": lambda: run_views.episodes(
                index, EpisodeFilter(run="run", task="task-7", min_step=middle)
            ),
            "episodes, newest 200": lambda: run_views.episodes(index, EpisodeFilter()),
            "one episode's records": lambda: index.records(f"e{episodes // 2}"),
        }
        for name, call in lists.items():
            print(f"    {name:<34} {median_ms(call):8.1f} ms")
        where = EpisodeFilter(run="run")
        size = len(run_page(index, "run", where).encode())
        took = median_ms(lambda: run_page(index, "run", where), times=5)
        print(f"    {'the run page, whole':<34} {took:8.1f} ms  {size / 1000:.0f} KB")
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="*", default=[10_000, 100_000])
    for episodes in parser.parse_args().episodes:
        bench(episodes)


if __name__ == "__main__":
    main()
