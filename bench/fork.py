"""Fork speed: the time until 8 episodes of one task are ready to play, 8 resets against one
reset and a fork of 7 (`corral/episode/fork`).

    python bench/fork.py                     # local and docker, ~3 min on 2 busy cores
    python bench/fork.py --only local --rounds 5

Serves bench/fixtures/slowload in this process, whose two envs take 2 s to load a task (a
repository cloned, a dataset read): `memory` keeps its state in memory and forks by replay (each
copy loads the task again and is given the episode's calls), `files` keeps it in a file and forks
by a copy of its files (each copy's env resumes without loading, and the file is copied in).
For each provider and env, `--rounds` times: 8 resets at once (as a GRPO group of 8 would open
them), then 1 reset followed by a fork of 7, each timed from the first request until all 8 have
answered; the medians are printed, with the ratio. Each episode then adds 1 and is scored, so
every copy is checked to play. `docker warm` keeps 8 started containers waiting per env
(`--warm-pool 8`), full again before each way is timed: a reset then skips the container's
start, and so does a copy.

Resets share the server's `--concurrent-starts` (4 on 2 cores; it covers the task's load), so 8
resets run in two waves. The client runs in this process beside the server, so the figures
include its share of the same cores. Timings depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from corral.client.episode import Episode
from corral.client.session import Session
from corral.protocol.frames import Limits, ResetData
from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.served import ServeOptions

BUNDLE = Path(__file__).resolve().parent / "fixtures" / "slowload"
GROUP = 8
TASKS = {"memory": "replay", "files": "copy"}  # task id (its env's name): how it forks


def opened(url: str, limits: Limits, task_id: str) -> Episode:
    episode = Episode(Session(url), limits)
    episode.start(ResetData(task_id=task_id))
    return episode


def by_resets(url: str, limits: Limits, task_id: str) -> tuple[float, list[Episode]]:
    began = time.monotonic()
    with ThreadPoolExecutor(GROUP) as pool:
        episodes = list(pool.map(lambda _: opened(url, limits, task_id), range(GROUP)))
    return time.monotonic() - began, episodes


def by_fork(url: str, limits: Limits, task_id: str) -> tuple[float, list[Episode]]:
    began = time.monotonic()
    first = opened(url, limits, task_id)
    episodes = [first, *first.fork(GROUP - 1)]
    return time.monotonic() - began, episodes


def played(episodes: list[Episode]) -> None:
    """Each adds 1 and ends: every one is a live episode of its own, scored 1."""
    for episode in episodes:
        assert episode.call("add", {"amount": 1}).answer == "1"
        episode.end_turn("")
        assert episode.reward == 1.0, (episode.status, episode.reason)
        episode.session.close()


def measure(sandbox: str, rounds: int, warm_pool: int) -> None:
    server = EmbeddedServer(BUNDLE, ServeOptions(sandbox=sandbox, max_concurrent_envs=GROUP, warm_pool=warm_pool))
    label = f"{sandbox}{' warm' if warm_pool else ''}"
    assert server.served is not None  # started
    try:
        metadata = httpx.get(f"{server.url}/metadata", trust_env=False).json()
        limits = Limits.model_validate({key: metadata[key] for key in Limits.model_fields})
        for task_id, mode in TASKS.items():
            if metadata["fork_modes"].get(task_id) != mode:
                print(f"{label:12s} {mode:7s} not served here (fork_modes {metadata['fork_modes']})")
                continue
            times: dict[str, list[float]] = {"resets": [], "fork": []}
            for _ in range(rounds):
                for way, make in (("resets", by_resets), ("fork", by_fork)):
                    while server.served.provider.status().warm.get(task_id, 0) < warm_pool:
                        time.sleep(0.05)  # each way finds the pool full
                    seconds, episodes = make(server.url, limits, task_id)
                    played(episodes)
                    times[way].append(seconds)
            resets, fork = statistics.median(times["resets"]), statistics.median(times["fork"])
            print(
                f"{label:12s} {mode:7s} {GROUP} resets {resets:6.2f} s   1 reset + fork({GROUP - 1}) "
                f"{fork:6.2f} s   {resets / fork:4.1f}x",
                flush=True,
            )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed groups per way, the median printed")
    parser.add_argument(
        "--only", choices=["local", "docker", "docker warm"], action="append", help="only these configurations"
    )
    args = parser.parse_args()
    for configuration in args.only or ["local", "docker", "docker warm"]:
        sandbox, _, warm = configuration.partition(" ")
        measure(sandbox, args.rounds, GROUP if warm else 0)


if __name__ == "__main__":
    main()
