"""The data path side by side: corral local, corral docker and OpenEnv 0.10 in-process.

    python bench/datapath.py                 # ~3 min on 2 busy cores
    python bench/datapath.py --rounds 2      # quicker, noisier
    python bench/datapath.py --baseline /tmp/main   # and corral local from another checkout, beside
    python bench/datapath.py --workers 2     # and corral local served by 2 worker processes, beside

Three servers, each `uvicorn` in a process of its own, one trivial echo tool each:
- corral local: `corral serve tests/fixtures/dockerbox --sandbox local` (tool `say`, the env a
  child process reached over pipes);
- corral docker: the same with `--sandbox docker --warm-pool 4` (each env in a hardened
  container reached over its Unix socket);
- with `--baseline CHECKOUT`, `baseline`: corral local again, run from another checkout's code
  (a worktree of main, say), so a change's effect is measured in the same run as the change;
- with `--workers N`, `local-wN`: corral local served with `corral serve --workers N` (its
  "server process" CPU is every worker's, summed);
- OpenEnv 0.10, in the server's own process (no sandbox at all), two ways: `openenv`, the
  plain echo `Environment` of OpenEnv's own template (a step with `{"message"}` answers it:
  the least a step can cost there, and the baseline), and `openenv-mcp`, an `MCPEnvironment`
  with a FastMCP `say` tool played with `call_tool` as corral is.

One driver plays them all over raw WebSocket frames (`reset`, then a `step` per call),
in alternating rounds so a busy moment of the shared machine hits each alike:
1. tool-call p50 and p99 at 1 session;
2. calls per second with 64 sessions at once, and the CPU each call costs the machine outside
   the driver (server, env processes, Docker's engine: what bounds calls/s on a busy host),
   and of that, the server's own process (OpenEnv's is all of it: its env runs inside);
3. docker warm reset p50: sequential resets, each once the pool is full again.
Printed as ratios to OpenEnv (and absolute figures beside them, for the record only); both
CPU columns are ratios to OpenEnv's whole CPU per call. On a machine others share, the whole
CPU counts their work too: the last column, the server's process against OpenEnv's (its whole
call: its env runs inside), is the figure to compare there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from common import free_port, start_server

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "tests" / "fixtures" / "dockerbox"
CORRAL_RESET = json.dumps({"type": "reset", "data": {"split": "plain", "index": 0}})
OPENENV_RESET = json.dumps({"type": "reset", "data": {}})
SAY = json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "say", "arguments": {"text": "plain"}}})
END_TURN = json.dumps(
    {"type": "step", "data": {"type": "call_tool", "tool_name": "end_turn", "arguments": {"response": "done"}}}
)
WARM_POOL = 4
KINDS = ("openenv", "openenv-mcp", "local", "docker")
PACKAGE_ROOTS = (
    "protocol",
    "client",
    "server",
    "sandboxes",
    "training",
)  # a checkout's folders that hold corral's packages

ECHO = json.dumps({"type": "step", "data": {"message": "plain"}})
OPENENV_SERVER = textwrap.dedent("""
    import sys, uvicorn
    from fastmcp import FastMCP
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import Action, Observation, State

    class EchoAction(Action):
        message: str

    class EchoObservation(Observation):
        echoed: str = ""

    class Echo(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._state = State(step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            return EchoObservation(done=False, reward=0.0)

        def step(self, action, timeout_s=None, **kwargs):
            return EchoObservation(echoed=action.message, done=False, reward=0.0)

        @property
        def state(self):
            return self._state

    class McpEcho(MCPEnvironment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            mcp = FastMCP("echo")

            @mcp.tool()
            def say(text: str) -> str:
                return text

            super().__init__(mcp)
            self._state = State(step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            return Observation(done=False, reward=0.0)

        def _step_impl(self, action, **kwargs):
            return Observation(done=False, reward=0.0)

        @property
        def state(self):
            return self._state

    if sys.argv[3] == "mcp":
        app = create_app(McpEcho, CallToolAction, CallToolObservation, env_name="echo", max_concurrent_envs=int(sys.argv[2]))
    else:
        app = create_app(Echo, EchoAction, EchoObservation, env_name="echo", max_concurrent_envs=int(sys.argv[2]))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
""")


def start(kind: str, sessions: int, baseline: Path | None = None, workers: int = 1) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = None
    if kind.startswith("openenv"):
        command = [sys.executable, "-c", OPENENV_SERVER, str(port), str(sessions), kind.removeprefix("openenv-")]
    else:
        corral = Path(sys.executable).parent / "corral"
        sandbox = "local" if kind == "baseline" or kind.startswith("local-w") else kind
        command = [
            str(corral),
            "serve",
            str(BUNDLE),
            "--port",
            str(port),
            "--max-concurrent-envs",
            str(sessions),
            "--sandbox",
            sandbox,
            *(["--warm-pool", str(WARM_POOL)] if kind == "docker" else []),
            *(["--workers", str(workers)] if kind.startswith("local-w") else []),
        ]
        if kind == "baseline":  # the other checkout's packages win over the installed ones
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(baseline / part) for part in PACKAGE_ROOTS)}
    server, url = start_server(command, port, f"the {kind} server", env=env)
    while kind.startswith("local-w") and not all(worker["pid"] for worker in workers_of(url)):
        time.sleep(0.2)  # every worker serving, so that each is counted and gets its share of sessions
    return server, url


def workers_of(url: str) -> list[dict]:
    """Each worker's pid and sessions, from a `corral serve --workers` host's /health."""
    return httpx.get(f"{url}/health", trust_env=False, timeout=30).json()["workers"]


async def opened(url: str, reset: str):
    socket_ = await connect(url.replace("http", "ws") + "/ws", max_size=None, proxy=None, open_timeout=120)
    await socket_.send(reset)
    await socket_.recv()
    return socket_


async def latencies(socket_, count: int, call: str) -> list[float]:
    found = []
    for _ in range(count):
        started = time.perf_counter()
        await socket_.send(call)
        await socket_.recv()
        found.append(time.perf_counter() - started)
    return found


async def rate(sockets, seconds: float, call: str, server_pids: list[int]) -> tuple[float, float, float]:
    """Calls per second with every socket calling at once, and the CPU seconds each call cost
    the machine outside this driver (server, envs, engine), from /proc/stat, and the server's
    own process alone."""
    deadline, done = time.perf_counter() + seconds, 0

    async def play(socket_) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await socket_.send(call)
            await socket_.recv()
            done += 1

    busy, mine, server, started = (
        machine_busy_s(),
        time.process_time(),
        processes_cpu_s(server_pids),
        time.perf_counter(),
    )
    await asyncio.gather(*(play(s) for s in sockets))
    elapsed = time.perf_counter() - started
    serving_cpu = (machine_busy_s() - busy) - (time.process_time() - mine)
    return done / elapsed, serving_cpu / done, (processes_cpu_s(server_pids) - server) / done


def server_processes(pid: int) -> list[int]:
    """The processes that serve for `corral serve` process `pid`: itself, and its workers when it
    has some (its children started by multiprocessing's spawn: not env processes, not the resource tracker)."""
    children = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in (entry / "cmdline").read_bytes():
                children.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return [pid, *children]


def processes_cpu_s(pids: list[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has spent, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every core has spent on anything but idling, since boot."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle, iowait = fields[3], fields[4]
    return (sum(fields[:8]) - idle - iowait) / os.sysconf("SC_CLK_TCK")


async def warm_resets(url: str, count: int) -> list[float]:
    """Sequential docker resets, each once the warm pool is full again (so each one is warm)."""
    found = []
    async with httpx.AsyncClient(trust_env=False) as http:
        socket_ = await opened(url, CORRAL_RESET)
        await socket_.send(END_TURN)
        await socket_.recv()
        for _ in range(count):
            while (await http.get(f"{url}/health")).json()["sandbox"]["warm"].get("plain", 0) < WARM_POOL:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # a quiet moment, as a trainer's resets come between generations
            started = time.perf_counter()
            await socket_.send(CORRAL_RESET)
            await socket_.recv()
            found.append(time.perf_counter() - started)
            await socket_.send(END_TURN)
            await socket_.recv()
        await socket_.close()
    return found


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


async def measure(urls: dict[str, str], pids: dict[str, list[int]], args: argparse.Namespace) -> dict:
    resets = {kind: OPENENV_RESET if kind.startswith("openenv") else CORRAL_RESET for kind in urls}
    steps = {kind: ECHO if kind == "openenv" else SAY for kind in urls}
    single = {kind: await opened(url, resets[kind]) for kind, url in urls.items()}
    many = {
        kind: await asyncio.gather(*(opened(url, resets[kind]) for _ in range(args.sessions)))
        for kind, url in urls.items()
    }
    calls = {kind: [] for kind in urls}
    rates = {kind: [] for kind in urls}
    cpu = {kind: [] for kind in urls}
    server_cpu = {kind: [] for kind in urls}
    spread = {
        kind: [worker["sessions"] for worker in workers_of(url)]
        for kind, url in urls.items()
        if kind.startswith("local-w")
    }
    for kind in urls:  # warm-up: imports, caches, the first calls' connections
        await latencies(single[kind], 100, steps[kind])
        await rate(many[kind], 1.0, steps[kind], pids[kind])
    for _ in range(args.rounds):
        for kind in urls:
            calls[kind] += await latencies(single[kind], args.calls, steps[kind])
            calls_per_s, cpu_per_call, server_cpu_per_call = await rate(
                many[kind], args.seconds, steps[kind], pids[kind]
            )
            rates[kind].append(calls_per_s)
            cpu[kind].append(cpu_per_call)
            server_cpu[kind].append(server_cpu_per_call)
    for sockets in (list(single.values()), *many.values()):
        await asyncio.gather(*(s.close() for s in sockets))
    warm = await warm_resets(urls["docker"], args.resets)
    return {
        "p50_ms": {k: statistics.median(v) * 1e3 for k, v in calls.items()},
        "p99_ms": {k: percentile(v, 99) * 1e3 for k, v in calls.items()},
        "calls_per_s": {k: statistics.median(v) for k, v in rates.items()},
        "cpu_us_per_call": {k: statistics.median(v) * 1e6 for k, v in cpu.items()},
        "server_cpu_us_per_call": {k: statistics.median(v) * 1e6 for k, v in server_cpu.items()},
        "warm_reset_p50_ms": statistics.median(warm) * 1e3,
        "warm_reset_p95_ms": percentile(warm, 95) * 1e3,
        "sessions_per_worker": spread,
    }


def report(figures: dict, sessions: int) -> None:
    base = "openenv"
    print(
        f"{'':14s}{'p50 (1 session)':>22s}{'p99 (1 session)':>22s}{f'calls/s ({sessions} sessions)':>28s}"
        f"{'CPU per call':>24s}{'its server process':>22s}{'vs OpenEnv process':>20s}"
    )
    for kind in figures["p50_ms"]:
        p50, p99, rate_ = figures["p50_ms"][kind], figures["p99_ms"][kind], figures["calls_per_s"][kind]
        cpu, server = figures["cpu_us_per_call"][kind], figures["server_cpu_us_per_call"][kind]
        print(
            f"{kind:14s}{p50 / figures['p50_ms'][base]:8.2f}x ({p50:6.3f} ms)"
            f"{p99 / figures['p99_ms'][base]:8.2f}x ({p99:6.3f} ms)"
            f"{rate_ / figures['calls_per_s'][base]:14.2f}x ({rate_:7.0f}/s)"
            f"{cpu / figures['cpu_us_per_call'][base]:12.2f}x ({cpu:5.0f} us)"
            f"{server / figures['cpu_us_per_call'][base]:12.2f}x ({server:5.0f} us)"
            f"{server / figures['server_cpu_us_per_call'][base]:19.2f}x"
        )
    print(
        f"docker warm reset p50 {figures['warm_reset_p50_ms']:.2f} ms (p95 {figures['warm_reset_p95_ms']:.2f} ms), "
        f"{figures['warm_reset_p50_ms'] / figures['p50_ms']['docker']:.1f}x a docker tool call"
    )
    for kind, held in figures["sessions_per_worker"].items():
        print(f"{kind}: sessions held by each worker {held} (the 1-session row's included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per measure")
    parser.add_argument("--calls", type=int, default=500, help="calls per round at 1 session")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per round at --sessions")
    parser.add_argument("--resets", type=int, default=40, help="docker warm resets")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--baseline", type=Path, help="also serve corral local from this checkout's code (e.g. main's)")
    parser.add_argument(
        "--workers", type=int, default=1, help="also serve corral local with this many worker processes"
    )
    args = parser.parse_args()
    servers = {}
    try:
        extra = [*(["baseline"] if args.baseline else []), *([f"local-w{args.workers}"] if args.workers > 1 else [])]
        for kind in (*KINDS, *extra):
            servers[kind] = start(kind, args.sessions + 2, args.baseline, args.workers)
        figures = asyncio.run(
            measure(
                {kind: url for kind, (_, url) in servers.items()},
                {kind: server_processes(server.pid) for kind, (server, _) in servers.items()},
                args,
            )
        )
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(120)
    print(json.dumps(figures) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        report(figures, args.sessions)


if __name__ == "__main__":
    main()
