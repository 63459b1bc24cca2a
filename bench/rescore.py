"""Re-scoring a run against replaying it: episodes per second, codeword on the local sandbox.

    python bench/rescore.py                       # 1,000 stored episodes, 2 verifier workers, 20 replayed
    python bench/rescore.py --episodes 5000 --workers 4 --replayed 40 --json

1. replay: `--replayed` codeword episodes played through an embedded server (local sandbox,
   `--record`), one after another: what scoring a run again by playing it would cost at the least (the
   same calls; a model's turns would add their own time);
2. store: those records copied (new ids) up to `--episodes` in a fresh records folder;
3. rescore: `corral rescore DIR --bundle bundles/codeword` as a user runs it (a process of its
   own: interpreter, bundle check and the verifier pool's boot included), and the same re-score
   in this process timed from the pool ready to the last result (the steady rate).

Prints each rate, and how much faster a re-score is than a replay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from corral.client import Bundle
from corral.protocol.frames import DEFAULT_RESET_TIMEOUT_S
from corral.protocol.record_store import EpisodeStore, RecordWriter
from corral.protocol.records import EpisodeRecord
from corral.server.episodes.rescoring import Rescorer
from corral.server.formats import load_bundle
from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.served import ServeOptions

CODEWORD = Path(__file__).resolve().parent.parent / "bundles" / "codeword"


def play(url: str, index: int) -> None:
    with Bundle(url, split="eval") as env:
        row = env.dataset[index % len(env.dataset)]
        episode = env.factory()
        episode.reset(**row)
        answer = json.loads(episode.lookup(word=row["prompt"][-1]["content"].split('"')[1]))
        episode.submit(number=answer["number"] + index % 2)
        assert episode.get_reward() is not None


def replay(records: Path, count: int) -> float:
    """Episodes per second, `count` played one after another into `records`."""
    server = EmbeddedServer(CODEWORD, ServeOptions(sandbox="local", record_dir=records))
    try:
        began = time.monotonic()
        for index in range(count):
            play(server.url, index)
        return count / (time.monotonic() - began)
    finally:
        server.stop()


def fill(played: Path, store: Path, count: int) -> None:
    """`count` records in `store`: the played ones again and again, each under a new id."""
    with EpisodeStore(played) as source:
        records = [r for r in source.records(source.find()) if isinstance(r, EpisodeRecord)]
    writer = RecordWriter(store, "episodes", source="codeword")
    for index in range(count):
        writer.write(records[index % len(records)].model_copy(update={"episode_id": uuid.uuid4().hex}))
    writer.close()


def rescore_command(store: Path, workers: int) -> float:
    corral = Path(sys.executable).parent / "corral"
    command = [str(corral), "rescore", str(store), "--bundle", str(CODEWORD), "--workers", str(workers)]
    began = time.monotonic()
    finished = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = time.monotonic() - began
    print(finished.stdout.strip().splitlines()[0], file=sys.stderr)
    return seconds


async def rescore_steady(store: Path, workers: int) -> tuple[float, int]:
    """Seconds from the pool ready to the last result, and how many were re-scored."""
    rescorer = Rescorer(load_bundle(CODEWORD), workers=workers, timeout_s=DEFAULT_RESET_TIMEOUT_S)
    await rescorer.pool.ready()
    with EpisodeStore(store) as source:
        records = [r for r in source.records(source.find()) if isinstance(r, EpisodeRecord)]
    began = time.monotonic()
    tally = await rescorer.rescore_all(records, lambda result, tally: None, at_once=workers * 4)
    seconds = time.monotonic() - began
    await rescorer.aclose()
    return seconds, tally.rescored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--replayed", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-rescore-bench-") as tmp:
        played, store = Path(tmp, "played"), Path(tmp, "store")
        replay_rate = replay(played, options.replayed)
        fill(played, store, options.episodes)
        command_s = rescore_command(store, options.workers)
        steady_s, rescored = asyncio.run(rescore_steady(store, options.workers))
    assert rescored == options.episodes, f"only {rescored} of {options.episodes} were re-scored"
    figures = {
        "episodes": options.episodes,
        "workers": options.workers,
        "replay_episodes_per_s": round(replay_rate, 2),
        "rescore_command_s": round(command_s, 2),
        "rescore_command_episodes_per_s": round(options.episodes / command_s, 1),
        "rescore_steady_episodes_per_s": round(options.episodes / steady_s, 1),
    }
    figures["command_vs_replay"] = round(figures["rescore_command_episodes_per_s"] / replay_rate, 1)
    if options.json:
        print(json.dumps(figures))
        return
    print(
        f"replay:  {replay_rate:8.2f} episodes/s ({options.replayed} codeword episodes played one after another, local sandbox)"
    )
    print(
        f"rescore: {figures['rescore_command_episodes_per_s']:8.1f} episodes/s as `corral rescore` "
        f"({options.episodes} in {command_s:.2f}s, {options.workers} workers, start included), "
        f"{figures['rescore_steady_episodes_per_s']:.1f}/s once its pool is ready"
    )
    print(f"a re-score is {figures['command_vs_replay']:g}x a replay's rate")


if __name__ == "__main__":
    main()
