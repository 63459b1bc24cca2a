"""Load: many sessions at once against a `corral serve` of its own, over raw WebSocket frames.

    python bench/load.py                               # toybox, local sandbox: 64 sessions x 60 s, then 512 at once
    python bench/load.py --sandbox docker --burst 64   # toybox on docker: each session a container
    python bench/load.py --bundle gridsim --sessions 8,32,64 --seconds 30          # docker gridsim
    python bench/load.py --bundle shellfix --sessions 32 --warm-pool 8 --rounds 2  # containers started ahead
    python bench/load.py --bundle gridsim --sessions 32 --baseline /tmp/old        # and another checkout, beside
    python bench/load.py --json                        # the figures as one JSON object

Serves a bundle (load_players: toybox, tests/fixtures/toybox, locally by default; gridsim and
shellfix on docker by default), a fresh server in a child process for each round, so the
server's memory and file descriptors are its own, and:

1. sustained: for each count in `--sessions`, that many sessions each play episodes back to
   back for `--seconds`, `--rounds` times; every episode must end scored, with the reward the
   player's moves earn. With `--warm-pool N`, each round starts once N containers per env
   are ready. With `--baseline CHECKOUT`, every round is played again by a server run from
   that checkout's code and bundle (a worktree of an older commit, say), alternating which
   goes first, so that the machine's noise hits both alike; the ratios are printed.
   The CPU each episode cost, by component (server, dockerd, containerd, runtime,
   containers, driver, other: load_cpu), is counted over each round;
2. burst: `--burst` sessions open at once, all reset at once and are held open together,
   then each plays its episode to its reward (the current checkout's server only).

Prints episodes/s, reset and tool-call p50/p99, the server's RSS and open fds before, during
and after, errors, wrong and unscored rewards, and the most sessions held with no error. The
client shares the machine's cores with the server: read the figures side by side, not as
absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import ClientConnection, connect

from corral.client.urls import ws_url

from common import free_port, start_server
from load_cpu import per_episode, sample, spent
from load_players import PLAYERS, Player, Tally

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOTS = ("protocol", "client", "server", "sandboxes", "training")
HANDSHAKE_TIMEOUT_S = 10.0
WARM_WAIT_S = 300.0
WARM_READY = re.compile(r"^corral_warm_pool_ready\{[^}]*\} ([0-9.]+)$", re.MULTILINE)


async def sustained(url: str, player: Player, sessions: int, seconds: float) -> Tally:
    tally, deadline = Tally(), time.monotonic() + seconds

    async def played(index: int) -> None:
        try:
            async with connect(ws_url(url), max_size=None, open_timeout=HANDSHAKE_TIMEOUT_S) as socket_:
                turn = index
                while time.monotonic() < deadline:
                    await player.reset(socket_, tally)
                    await player.finish(socket_, turn, tally)
                    turn += 1
        except Exception as error:  # noqa: BLE001 - counted, and the run goes on
            tally.errors.append(repr(error))

    await asyncio.gather(*(played(i) for i in range(sessions)))
    return tally


async def burst(url: str, player: Player, sessions: int, server_pid: int) -> tuple[Tally, int, dict[str, float]]:
    """`sessions` opened and reset at once, then held and played; (tally, held, usage while held)."""
    tally = Tally()

    async def opened() -> ClientConnection | None:
        try:
            started = time.perf_counter()
            # the handshake's deadline is a client's (corral.client.Session's and OpenEnv's: 10 s)
            socket_ = await connect(ws_url(url), max_size=None, open_timeout=HANDSHAKE_TIMEOUT_S)
            tally.connect_s.append(time.perf_counter() - started)
            await player.reset(socket_, tally)
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
            await player.finish(socket_, index, tally)
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


def serve(
    checkout: Path, bundle: Path, sandbox: str, max_sessions: int, warm_pool: int
) -> tuple[subprocess.Popen, str]:
    """`corral serve` run from `checkout`'s code (its packages first on the path)."""
    port = free_port()
    corral = Path(sys.executable).parent / "corral"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(str(checkout / part) for part in PACKAGE_ROOTS)}
    command = [str(corral), "serve", str(bundle), "--sandbox", sandbox, "--port", str(port)]
    command += ["--max-concurrent-envs", str(max_sessions), "--warm-pool", str(warm_pool)]
    return start_server(command, port, f"corral serve from {checkout}", env=environment)


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(120)


def wait_warm(url: str, warm_pool: int) -> None:
    """Until every env's warm pool holds `warm_pool` started sandboxes (as /metrics says)."""
    deadline = time.monotonic() + WARM_WAIT_S
    while warm_pool and time.monotonic() < deadline:
        ready = WARM_READY.findall(httpx.get(f"{url}/metrics", trust_env=False, timeout=10).text)
        if ready and min(float(value) for value in ready) >= warm_pool:
            return
        time.sleep(0.5)
    if warm_pool:
        progress(f"the warm pool did not fill within {WARM_WAIT_S:g} s; playing anyway")


def play_round(checkout: Path, bundle: Path, args: argparse.Namespace, sessions: int) -> dict:
    """One fresh server, `sessions` sessions for `args.seconds`: the round's raw figures."""
    server, url = serve(checkout, bundle, args.sandbox, sessions, args.warm_pool)
    try:
        wait_warm(url, args.warm_pool)
        before, started = sample(server.pid), time.monotonic()
        tally = asyncio.run(sustained(url, PLAYERS[args.bundle], sessions, args.seconds))
        seconds = time.monotonic() - started
        cpu = spent(before, sample(server.pid))
        usage = usage_of(server.pid)
    finally:
        stop(server)
    return {"tally": tally, "seconds": seconds, "cpu": cpu, "usage": usage}


def merged(rounds: list[dict], sessions: int) -> dict:
    """The rounds of one checkout at `sessions` as one set of figures."""
    tally, cpu = Tally(), dict.fromkeys(rounds[0]["cpu"], 0.0)
    for one in rounds:
        for name in ("episodes", "wrong_rewards", "unscored"):
            setattr(tally, name, getattr(tally, name) + getattr(one["tally"], name))
        for name in ("errors", "reset_s", "tool_s"):
            getattr(tally, name).extend(getattr(one["tally"], name))
        for key, value in one["cpu"].items():
            cpu[key] += value
    seconds = sum(one["seconds"] for one in rounds)
    return {
        "sessions": sessions,
        "rounds_episodes_per_s": [round(one["tally"].episodes / one["seconds"], 2) for one in rounds],
        **figures(tally, seconds),
        "cpu_ms_per_episode": per_episode(cpu, tally.episodes),
        "server_after": rounds[-1]["usage"],
        "first_errors": tally.errors[:3],
    }


def sustained_runs(args: argparse.Namespace, scratch: Path) -> dict[str, list[dict]]:
    """{checkout kind: figures per session count}, the kinds' rounds alternated."""
    checkouts = {"current": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    player = PLAYERS[args.bundle]
    bundles = {kind: player.bundle(checkout, args.sandbox, scratch) for kind, checkout in checkouts.items()}
    runs: dict[str, list[dict]] = {kind: [] for kind in checkouts}
    for sessions in args.sessions:
        rounds: dict[str, list[dict]] = {kind: [] for kind in checkouts}
        for number in range(args.rounds):
            order = list(checkouts) if number % 2 == 0 else list(reversed(checkouts))
            for kind in order:
                progress(f"{kind}, round {number + 1}: {sessions} sessions for {args.seconds:g} s")
                rounds[kind].append(play_round(checkouts[kind], bundles[kind], args, sessions))
                tally = rounds[kind][-1]["tally"]
                progress(f"{kind}: {tally.episodes} episodes, {len(tally.errors)} errors, {tally.unscored} unscored")
        for kind in checkouts:
            runs[kind].append(merged(rounds[kind], sessions))
    return runs


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else float("nan")


def figures(tally: Tally, seconds: float) -> dict[str, float | int]:
    return {
        "episodes": tally.episodes,
        "episodes_per_s": round(tally.episodes / seconds, 2),
        "errors": len(tally.errors),
        "wrong_rewards": tally.wrong_rewards,
        "unscored": tally.unscored,
        "connect_p99_ms": round(percentile(tally.connect_s, 99), 2),
        "reset_p50_ms": round(percentile(tally.reset_s, 50), 2),
        "reset_p99_ms": round(percentile(tally.reset_s, 99), 2),
        "tool_p50_ms": round(percentile(tally.tool_s, 50), 2),
        "tool_p99_ms": round(percentile(tally.tool_s, 99), 2),
    }


def session_counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",") if count.strip()]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", default="toybox", choices=sorted(PLAYERS))
    parser.add_argument("--sandbox", choices=["local", "docker"], help="default: local for toybox, else docker")
    parser.add_argument("--sessions", type=session_counts, default=[64], help="session counts, e.g. 8,32,64")
    parser.add_argument("--seconds", type=float, default=60, help="each sustained round's length")
    parser.add_argument("--rounds", type=int, default=1, help="sustained rounds per session count (and checkout)")
    parser.add_argument("--burst", type=int, help="sessions opened at once (default: 512 for toybox, else 0)")
    parser.add_argument("--warm-pool", type=int, default=0, help="sandboxes per env started ahead of demand")
    parser.add_argument("--baseline", type=Path, help="also play every round from this checkout's code and bundle")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    args.sandbox = args.sandbox or ("local" if args.bundle == "toybox" else "docker")
    args.burst = (512 if args.bundle == "toybox" else 0) if args.burst is None else args.burst
    return args


def main() -> None:
    args = arguments()
    scratch = tempfile.TemporaryDirectory(prefix="corral-load-")
    report: dict = {"bundle": args.bundle, "sandbox": args.sandbox, "warm_pool": args.warm_pool}
    try:
        if args.seconds and args.sessions:
            report["sustained"] = sustained_runs(args, Path(scratch.name))
        if args.burst:
            player = PLAYERS[args.bundle]
            bundle = player.bundle(ROOT, args.sandbox, Path(scratch.name))
            server, url = serve(ROOT, bundle, args.sandbox, args.burst, args.warm_pool)
            try:
                wait_warm(url, args.warm_pool)
                report["idle"] = usage_of(server.pid)
                progress(f"burst: {args.burst} sessions opening and resetting at once")
                started = time.monotonic()
                tally, held, usage = asyncio.run(burst(url, player, args.burst, server.pid))
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
                stop(server)
    finally:
        scratch.cleanup()
    if args.json:
        print(json.dumps(report))
        return
    printed(report)


def printed(report: dict) -> None:
    print(f"{report['bundle']} on {report['sandbox']}, warm pool {report['warm_pool']}")
    runs = report.get("sustained", {})
    for index, current in enumerate(runs.get("current", [])):
        for kind, figures_ in runs.items():
            one = figures_[index]
            print(f"sustained, {kind}: " + ", ".join(f"{key} {value}" for key, value in one.items()))
        if "baseline" in runs and runs["baseline"][index]["episodes_per_s"]:
            ratio = current["episodes_per_s"] / runs["baseline"][index]["episodes_per_s"]
            print(f"{current['sessions']} sessions: current / baseline episodes/s = {ratio:.2f}x")
    if "burst" in report:
        print(f"server idle: {report['idle']}")
        print("burst: " + ", ".join(f"{key} {value}" for key, value in report["burst"].items()))
        for moment in ("while_held", "after_burst"):
            print(f"server {moment.replace('_', ' ')}: {report[moment]}")


if __name__ == "__main__":
    main()
