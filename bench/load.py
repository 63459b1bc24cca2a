"""Load: many sessions at once against a `corral serve` of its own, over raw WebSocket frames.

    python bench/load.py                               # local sandbox: 64 sessions x 60 s, then 512 at once
    python bench/load.py --sandbox docker --burst 64   # docker: each session a container
    python bench/load.py --sandbox docker --warm-pool 8 --burst 0   # docker, containers started ahead
    python bench/load.py --json                        # the figures as one JSON object

Serves tests/fixtures/toybox (split `toy`: say the word `apple` for 1.0) in a child process,
so the server's memory and file descriptors are its own, and:

1. sustained: `--sessions` sessions each play episodes back to back for `--seconds`,
   alternating the right word (reward 1.0) and a wrong one (0.0); every reward is checked;
2. burst: `--burst` sessions open at once, all reset at once and are held open together,
   then each plays its episode to its reward.

Prints episodes/s, reset and tool-call p50/p99, the server's RSS and open fds before, during
and after, errors, wrong rewards, and the most sessions held with no error. The client shares
the machine's cores with the server: read the figures side by side, not as absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect

from corral.client.urls import ws_url
from corral.protocol.frames import (
    CallTool,
    CallToolObservation,
    ResetData,
    ResetRequest,
    StepRequest,
)

from common import exchange, free_port, start_server

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "tests" / "fixtures" / "toybox"
# toybox's envs name no image; in containers they run on the one the docker tests build.
DOCKERFILE = ROOT / "tests" / "fixtures" / "dockerbox" / "envs" / "probe" / "Dockerfile"
RESET = ResetRequest(data=ResetData(split="toy", index=0))
WORDS = {"apple": 1.0, "pear": 0.0}
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass
class Tally:
    episodes: int = 0
    errors: list[str] = field(default_factory=list)
    wrong_rewards: int = 0
    connect_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    tool_s: list[float] = field(default_factory=list)


async def reset(socket_: ClientConnection, tally: Tally) -> None:
    started = time.perf_counter()
    await exchange(socket_, RESET)
    tally.reset_s.append(time.perf_counter() - started)


async def finish(socket_: ClientConnection, word: str, tally: Tally) -> None:
    """Say `word`, end the turn, and check the reward is the one the word earns."""
    started = time.perf_counter()
    await exchange(socket_, StepRequest(data=CallTool(tool_name="say", arguments={"text": word})))
    tally.tool_s.append(time.perf_counter() - started)
    ended = (
        await exchange(socket_, StepRequest(data=CallTool(tool_name="end_turn", arguments={"response": ""})))
    ).parse(CallToolObservation)
    tally.episodes += 1
    if ended.reward != WORDS[word]:
        tally.wrong_rewards += 1


async def sustained(url: str, sessions: int, seconds: float) -> Tally:
    tally, deadline = Tally(), time.monotonic() + seconds

    async def player(index: int) -> None:
        try:
            async with connect(ws_url(url), max_size=None, open_timeout=HANDSHAKE_TIMEOUT_S) as socket_:
                turn = index
                while time.monotonic() < deadline:
                    await reset(socket_, tally)
                    await finish(socket_, list(WORDS)[turn % 2], tally)
                    turn += 1
        except Exception as error:  # noqa: BLE001 - counted, and the run goes on
            tally.errors.append(repr(error))

    await asyncio.gather(*(player(i) for i in range(sessions)))
    return tally


async def burst(url: str, sessions: int, server_pid: int) -> tuple[Tally, int, dict[str, float]]:
    """`sessions` opened and reset at once, then held and played; (tally, held, usage while held)."""
    tally, sockets = Tally(), []

    async def opened() -> ClientConnection | None:
        try:
            started = time.perf_counter()
            # the handshake's deadline is a client's (corral.client.Session's and OpenEnv's: 10 s)
            socket_ = await connect(ws_url(url), max_size=None, open_timeout=HANDSHAKE_TIMEOUT_S)
            tally.connect_s.append(time.perf_counter() - started)
            await reset(socket_, tally)
            return socket_
        except Exception as error:  # noqa: BLE001 - counted
            tally.errors.append(repr(error))
            return None

    started = time.monotonic()
    sockets = [s for s in await asyncio.gather(*(opened() for _ in range(sessions))) if s is not None]
    held, usage = len(sockets), usage_of(server_pid)
    progress(f"burst: {held} of {sessions} held after {time.monotonic() - started:.0f} s; playing them")

    async def played(index: int, socket_: ClientConnection) -> None:
        try:
            await finish(socket_, list(WORDS)[index % 2], tally)
        except Exception as error:  # noqa: BLE001 - counted
            tally.errors.append(repr(error))
        finally:
            await socket_.close()

    await asyncio.gather(*(played(i, s) for i, s in enumerate(sockets)))
    return tally, held, usage


def progress(message: str) -> None:
    """A line on stderr as each phase starts and ends: a run cut short shows where it was."""
    print(f"load: {message}", file=sys.stderr, flush=True)


def usage_of(pid: int) -> dict[str, float]:
    """A process's resident memory (MB) and open file descriptors."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {"rss_mb": round(rss / 1024, 1), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def bundle_for(sandbox: str, scratch: Path) -> Path:
    """toybox, as it is for processes; for containers, a copy in `scratch` with a Dockerfile per env."""
    if sandbox != "docker":
        return BUNDLE
    copy = Path(shutil.copytree(BUNDLE, scratch / BUNDLE.name))
    for env in (copy / "envs").iterdir():
        shutil.copy(DOCKERFILE, env / "Dockerfile")
    return copy


def serve(bundle: Path, sandbox: str, max_sessions: int, warm_pool: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    corral = Path(sys.executable).parent / "corral"
    return start_server(
        [
            str(corral),
            "serve",
            str(bundle),
            "--sandbox",
            sandbox,
            "--port",
            str(port),
            "--max-concurrent-envs",
            str(max_sessions),
            "--warm-pool",
            str(warm_pool),
        ],
        port,
        "corral serve",
    )


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else float("nan")


def figures(tally: Tally, seconds: float) -> dict[str, float | int]:
    return {
        "episodes": tally.episodes,
        "episodes_per_s": round(tally.episodes / seconds, 1),
        "errors": len(tally.errors),
        "wrong_rewards": tally.wrong_rewards,
        "connect_p99_ms": round(percentile(tally.connect_s, 99), 2),
        "reset_p50_ms": round(percentile(tally.reset_s, 50), 2),
        "reset_p99_ms": round(percentile(tally.reset_s, 99), 2),
        "tool_p50_ms": round(percentile(tally.tool_s, 50), 2),
        "tool_p99_ms": round(percentile(tally.tool_s, 99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", default="local", choices=["local", "docker"])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--burst", type=int, default=512)
    parser.add_argument("--warm-pool", type=int, default=0, help="sandboxes per env started ahead of demand")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="corral-load-")
    server, url = serve(
        bundle_for(args.sandbox, Path(scratch.name)), args.sandbox, max(args.sessions, args.burst), args.warm_pool
    )
    try:
        report = {"sandbox": args.sandbox, "warm_pool": args.warm_pool, "idle": usage_of(server.pid)}
        if args.sessions and args.seconds:
            progress(f"sustained: {args.sessions} sessions for {args.seconds:g} s")
            started = time.monotonic()
            tally = asyncio.run(sustained(url, args.sessions, args.seconds))
            report["sustained"] = {
                "sessions": args.sessions,
                **figures(tally, time.monotonic() - started),
                "first_errors": tally.errors[:3],
            }
            report["after_sustained"] = usage_of(server.pid)
            progress(f"sustained: {tally.episodes} episodes, {len(tally.errors)} errors")
        if args.burst:
            progress(f"burst: {args.burst} sessions opening and resetting at once")
            started = time.monotonic()
            tally, held, usage = asyncio.run(burst(url, args.burst, server.pid))
            report["burst"] = {
                "sessions": args.burst,
                "held": held,
                **figures(tally, time.monotonic() - started),
                "first_errors": tally.errors[:3],
            }
            report["while_held"] = usage
            time.sleep(2)
            report["after_burst"] = usage_of(server.pid)
    finally:
        server.terminate()
        server.wait(120)
        scratch.cleanup()
    if args.json:
        print(json.dumps(report))
        return
    print(f"sandbox {report['sandbox']}, warm pool {report['warm_pool']}; server idle: {report['idle']}")
    for phase in ("sustained", "burst"):
        if phase in report:
            print(f"{phase}: " + ", ".join(f"{key} {value}" for key, value in report[phase].items()))
    for moment in ("after_sustained", "while_held", "after_burst"):
        if moment in report:
            print(f"server {moment.replace('_', ' ')}: {report[moment]}")


if __name__ == "__main__":
    main()
