"""Harbor tasks on corral: what a folder of tasks costs to build, to reset and to play.

    python bench/harbor.py                         # tests/fixtures/harbor, ~3 min on 2 cores
    python bench/harbor.py PATH --rebuild          # another folder; build every image afresh

For a folder of Harbor tasks, served with the docker sandbox in this process:

1. build time per task image (`--rebuild` removes the tasks' and their base images first, so
   every build is measured from the base it maps to; otherwise cached images say `cached`);
2. reset-to-first-prompt p50 and p95, cold (a container started per reset) and with a warm
   pool of one container per task (each reset waits until its task's pool is full again),
   over `--resets` resets cycling through the tasks;
3. the oracle's pass rate (solution/solve.sh through the agent's tools scores 1) and the
   null agent's (ending the turn at once scores 0), as `corral check --oracle --null` plays them;
4. episodes per second with 8 sessions at once, each playing null episodes (reset, end_turn:
   the tests run in a fresh container of a commit of the agent's) through the tasks.

The client runs in this process beside the server, so the figures include its share of the
same cores. Timings depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections.abc import Iterable
from pathlib import Path

import docker
import docker.errors
from websockets.asyncio.client import connect

from corral.cli.oracle import check_tasks
from corral.client import urls
from corral.protocol.frames import (
    CallTool,
    ResetData,
    ResetRequest,
    StepRequest,
)
from corral.sandboxes import make_provider
from corral.server.bundles.checks import sandbox_spec
from corral.server.formats import load_bundle
from corral.server.harbor.hosted import HarborProvider
from corral.server.harbor.images import BaseBuild, ImagePlan
from corral.server.harbor.part import harbor_part
from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle

from common import exchange

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = 8
END_TURN = StepRequest(data=CallTool(tool_name="end_turn", arguments={"response": ""}))


def reset(task_id: str) -> ResetRequest:
    return ResetRequest(data=ResetData(task_id=task_id))


async def build_times(folder: Path, rebuild: bool) -> list[tuple[str, str]]:
    """Each task's image, prepared in turn: (task, how long it took or `cached`)."""
    bundle = load_bundle(folder)
    part = harbor_part(bundle)
    assert part is not None, f"{folder} is not a folder of Harbor tasks"
    if rebuild:
        remove_images(part.images, bundle.envs)
    provider = HarborProvider(make_provider("docker"), part.images)
    times = []
    try:
        for env in bundle.envs.values():
            bases = len(part.images.bases)
            started = time.perf_counter()
            prepared = await provider.prepare(sandbox_spec(env), lambda line: None)
            took = time.perf_counter() - started
            based = " (with the base image it maps to)" if len(part.images.bases) > bases else ""
            times.append((env.name, f"{took:6.1f} s{based}" if prepared.built else "cached"))
    finally:
        await provider.aclose()
    return times


def remove_images(images: ImagePlan, envs: Iterable[str]) -> None:
    """The tasks' images and the base images the bundle builds (with every image built on
    them), so the next builds are measured whole."""
    client = docker.from_env()
    bases = [
        image.id
        for value in images.base_images.values()
        if isinstance(value, BaseBuild)
        for image in client.images.list(name=f"corral-env/base-{value.folder.name}")
    ]
    doomed = [image.id for env in envs for image in client.images.list(name=f"corral-env/{env.lower()}")]
    for image in client.images.list(all=True):
        if image.id not in bases and any(layer["Id"] in bases for layer in client.api.history(image.id)):
            doomed.append(image.id)  # built on a base: it must go before the base can
    left = list(dict.fromkeys([*doomed, *bases]))
    while left:  # a child first: an image with children cannot go, so go round until all have
        failed = []
        for image_id in left:
            try:
                client.images.remove(image_id, force=True)
            except docker.errors.ImageNotFound:
                pass
            except docker.errors.APIError:
                failed.append(image_id)
        if len(failed) == len(left):
            raise RuntimeError(f"could not remove {len(failed)} image(s), e.g. {failed[0]}: are containers using them?")
        left = failed
    client.close()


async def reset_latencies(server: EmbeddedServer, tasks: list[str], count: int, warm: bool) -> list[float]:
    latencies = []
    async with connect(urls.ws_url(server.url), max_size=None) as socket:
        for task_id in itertools.islice(itertools.cycle(tasks), count):
            while warm and server.served.provider.status().warm.get(task_id, 0) < 1:
                await asyncio.sleep(0.02)
            started = time.perf_counter()
            observed = await exchange(socket, reset(task_id))
            latencies.append(time.perf_counter() - started)
            assert observed.observation.get("status") is None, observed.observation
            await exchange(socket, END_TURN)
    return latencies


async def throughput(server: EmbeddedServer, tasks: list[str], seconds: float) -> tuple[float, int]:
    """Null episodes per second with SESSIONS sessions at once for `seconds`; and how many were not scored 0."""
    deadline = time.perf_counter() + seconds
    done, off = 0, 0

    async def session(offset: int) -> None:
        nonlocal done, off
        async with connect(urls.ws_url(server.url), max_size=None) as socket:
            for task_id in itertools.islice(itertools.cycle(tasks), offset, None):
                if time.perf_counter() >= deadline:
                    return
                await exchange(socket, reset(task_id))
                ended = await exchange(socket, END_TURN)
                done += 1
                off += ended.reward != 0.0

    started = time.perf_counter()
    await asyncio.gather(*(session(offset) for offset in range(SESSIONS)))
    return done / (time.perf_counter() - started), off


async def pass_rates(folder: Path) -> str:
    served = await ServedBundle.open(folder, ServeOptions(sandbox="docker"))
    try:
        started = time.perf_counter()
        verdicts = await check_tasks(served, oracle=True, null=True)
        took = time.perf_counter() - started
    finally:
        await served.aclose()
    lines = []
    for agent in ("oracle", "null"):
        played = [verdict for verdict in verdicts if verdict.agent == agent]
        passed = sum(verdict.ok for verdict in played)
        flagged = ", ".join(verdict.task_id for verdict in played if not verdict.ok) or "none"
        lines.append(
            f"{agent:6s} pass rate {passed}/{len(played)} ({100 * passed / max(1, len(played)):.0f}%), "
            f"flagged: {flagged}"
        )
    lines.append(f"({len(verdicts)} episodes, 2 at a time, in {took:.1f} s)")
    return "\n".join(lines)


def quantiles(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "tests" / "fixtures" / "harbor")
    parser.add_argument("--rebuild", action="store_true", help="remove the tasks' images first and build them again")
    parser.add_argument("--resets", type=int, default=24, help="resets per configuration, cycling through the tasks")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the 8 sessions play")
    args = parser.parse_args()

    print(f"build, one image per task ({args.folder}):", flush=True)
    for task_id, took in asyncio.run(build_times(args.folder, args.rebuild)):
        print(f"  {task_id:20s} {took}", flush=True)
    tasks = list(load_bundle(args.folder).tasks)
    for label, pool in (("cold", 0), ("warm pool", 1)):
        server = EmbeddedServer(
            args.folder, ServeOptions(sandbox="docker", warm_pool=pool, max_concurrent_envs=SESSIONS)
        )
        try:
            latencies = asyncio.run(reset_latencies(server, tasks, args.resets, warm=pool > 0))
        finally:
            server.stop()
        print(f"reset-to-first-prompt, {label:9s} {quantiles(latencies)}  ({len(latencies)} resets)", flush=True)
    print(asyncio.run(pass_rates(args.folder)), flush=True)
    server = EmbeddedServer(args.folder, ServeOptions(sandbox="docker", max_concurrent_envs=SESSIONS))
    try:
        rate, off = asyncio.run(throughput(server, tasks, args.seconds))
    finally:
        server.stop()
    print(
        f"{SESSIONS} sessions, null episodes (reset, end_turn, tests in a fresh container): {rate:.2f} episodes/s"
        f"{f' ({off} not scored 0)' if off else ''}"
    )


if __name__ == "__main__":
    main()
