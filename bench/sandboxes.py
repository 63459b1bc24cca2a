"""Sandbox speed: how fast a reset reaches its first prompt, and how many episodes flow.

    python bench/sandboxes.py                    # ~3 min on 2 busy cores
    python bench/sandboxes.py --concurrent 64    # a lighter hold test

Serves the `plain` task of tests/fixtures/dockerbox (one tool, `say`) in this process and
plays it over raw WebSocket frames, for the local provider (in its namespaces, and without
them: bwrap hidden from PATH, as on a machine without bubblewrap), docker cold (no pool) and
docker with a warm pool:

1. reset-to-first-prompt p50 and p95 over `--resets` sequential resets (for the warm pool,
   each reset waits until the pool is full again, so every reset finds a warm container);
2. episodes per second with 8 sessions at once, each playing reset, `say`, `end_turn`;
3. docker only: `--concurrent` episodes held open at once (all reset, then all played to
   their reward), counting errors.

The client runs in this process beside the server, so the figures include its share of
the same two cores. Timings depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from websockets.asyncio.client import connect

from corral.client import urls
from corral.protocol.frames import (
    CallTool,
    ResetData,
    ResetRequest,
    StepRequest,
)
from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.options import ServeOptions

from common import exchange

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "tests" / "fixtures" / "dockerbox"
RESET = ResetRequest(data=ResetData(split="plain", index=0))
SESSIONS = 8


def call(name: str, **arguments) -> StepRequest:
    return StepRequest(data=CallTool(tool_name=name, arguments=arguments))


async def play(socket) -> float | None:
    """One episode on an open socket: reset, say the word, end the turn; its reward."""
    await exchange(socket, RESET)
    await exchange(socket, call("say", text="plain"))
    return (await exchange(socket, call("end_turn", response="done"))).reward


def ws_url(server: EmbeddedServer) -> str:
    return urls.ws_url(server.url)


async def reset_latencies(server: EmbeddedServer, count: int, warm_pool: int) -> list[float]:
    latencies = []
    async with connect(ws_url(server), max_size=None) as socket:
        for _ in range(count):
            if warm_pool:
                await wait_for_pool(server, warm_pool)
            started = time.perf_counter()
            await exchange(socket, RESET)
            latencies.append(time.perf_counter() - started)
            await exchange(socket, call("end_turn", response="done"))
    return latencies


async def wait_for_pool(server: EmbeddedServer, size: int) -> None:
    """Until the pool holds `size` containers whose env answers: the reset measured is warm."""
    while server.served.provider.status().warm.get("plain", 0) < size:
        await asyncio.sleep(0.02)


async def throughput(server: EmbeddedServer, seconds: float) -> float:
    """Episodes per second with SESSIONS sessions playing at once for `seconds`."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def session() -> None:
        nonlocal done
        async with connect(ws_url(server), max_size=None) as socket:
            while time.perf_counter() < deadline:
                assert await play(socket) == 1.0
                done += 1

    started = time.perf_counter()
    await asyncio.gather(*(session() for _ in range(SESSIONS)))
    return done / (time.perf_counter() - started)


async def hold(server: EmbeddedServer, count: int) -> tuple[int, int, float]:
    """`count` episodes open at once; (scored with reward 1, errors, seconds to open them all)."""
    sockets = [await connect(ws_url(server), max_size=None, open_timeout=120) for _ in range(count)]
    errors = 0
    started = time.perf_counter()
    opened = await asyncio.gather(*(exchange(s, RESET) for s in sockets), return_exceptions=True)
    opening = time.perf_counter() - started
    errors += sum(isinstance(o, BaseException) or o.observation.get("status") == "unscored" for o in opened)

    async def finish(socket) -> float | None:
        await exchange(socket, call("say", text="plain"))
        return (await exchange(socket, call("end_turn", response="done"))).reward

    rewards = await asyncio.gather(*(finish(s) for s in sockets), return_exceptions=True)
    scored = sum(r == 1.0 for r in rewards)
    errors += sum(isinstance(r, BaseException) for r in rewards)
    await asyncio.gather(*(s.close() for s in sockets))
    return scored, errors, opening


@contextlib.contextmanager
def path_without_bubblewrap() -> Iterator[None]:
    """PATH as it is, less bwrap: a folder linking every other program of the folders that hold
    it, in their place. The local provider then finds no bwrap, as where it is not installed."""
    saved = os.environ["PATH"]
    farm = Path(tempfile.mkdtemp(prefix="corral-bench-no-bwrap-"))
    farm.chmod(0o755)  # a server running as root runs envs as other uids
    kept = []
    for folder in saved.split(os.pathsep):
        if not (Path(folder) / "bwrap").exists():
            kept.append(folder)
            continue
        for program in Path(folder).iterdir():
            if program.name != "bwrap" and not (farm / program.name).exists():
                (farm / program.name).symlink_to(program)
    os.environ["PATH"] = os.pathsep.join([str(farm), *kept])
    try:
        yield
    finally:
        os.environ["PATH"] = saved
        shutil.rmtree(farm)


def quantiles(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=30, help="sequential resets per configuration")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the 8 sessions play")
    parser.add_argument("--concurrent", type=int, default=256, help="docker episodes held at once")
    parser.add_argument("--warm-pool", type=int, default=SESSIONS, help="warm containers per env")
    parser.add_argument(
        "--only",
        choices=["local", "local, no namespace", "docker cold", "docker warm"],
        action="append",
        help="measure only these configurations (repeatable)",
    )
    args = parser.parse_args()

    configurations = [
        ("local", "local", 0),
        ("local, no namespace", "local", 0),
        ("docker cold", "docker", 0),
        ("docker warm", "docker", args.warm_pool),
    ]
    configurations = [c for c in configurations if not args.only or c[0] in args.only]
    medians = {}
    for label, sandbox, pool in configurations:
        hidden = path_without_bubblewrap() if label == "local, no namespace" else contextlib.nullcontext()
        with hidden:  # the provider looks for bwrap once, when it is made
            server = EmbeddedServer(
                BUNDLE,
                ServeOptions(
                    sandbox=sandbox,
                    warm_pool=pool,
                    max_concurrent_envs=SESSIONS,
                    unsafe_local_shell=label == "local, no namespace",
                ),
            )
        try:
            latencies = asyncio.run(reset_latencies(server, args.resets, pool))
            rate = asyncio.run(throughput(server, args.seconds))
        finally:
            server.stop()
        medians[label] = statistics.median(latencies)
        print(
            f"{label:20s} reset-to-first-prompt {quantiles(latencies)}   {SESSIONS} sessions: {rate:6.1f} episodes/s",
            flush=True,
        )
    if {"local", "local, no namespace"} <= medians.keys():
        print(
            f"local reset p50 in namespaces is {medians['local'] / medians['local, no namespace']:.2f}x "
            "that without them"
        )
    if {"docker cold", "docker warm"} <= medians.keys():
        print(f"warm-pool reset is {medians['docker cold'] / medians['docker warm']:.0f}x faster than a cold deploy")

    if args.concurrent:
        server = EmbeddedServer(BUNDLE, ServeOptions(sandbox="docker", max_concurrent_envs=args.concurrent))
        try:
            scored, errors, opening = asyncio.run(hold(server, args.concurrent))
        finally:
            server.stop()
        print(
            f"{args.concurrent} docker episodes held at once: {scored} scored, {errors} errors "
            f"(all reset in {opening:.0f}s)"
        )


if __name__ == "__main__":
    main()
