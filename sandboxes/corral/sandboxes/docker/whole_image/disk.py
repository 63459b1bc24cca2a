"""A bound on what an image run whole (a Harbor task's container) writes to its root.

Such a container's root is the engine's writable layer, on this machine's disk: docker bounds
it only on some storage drivers (overlay2 over xfs with project quotas; not ext4, not here),
so an agent could fill the env host's disk. The provider watches it instead: it asks the
engine for the layer's size (`SizeRw`: the apparent size, a sparse file counted at its length,
as a commit writes it out) and for the paths it changed, each counted at PATH_BYTES at least
(a file takes a block and an inode however small: 200,000 empty files are no free lunch), and
past the spec's `disk_mb` it kills the container and says why in its stderr tail. The agent's
episode then ends as any container killed for a limit does (its own doing: the task's failure
score). A watch can let an agent write up to what the disk takes between two asks past the
limit; the verifier measures once more after its pause, before any commit (docker.whole_image.snapshot).

Each ask makes the engine walk the layer, which an agent can make long (a million small
files: 200,000 empty ones took 0.6 s for the size and 2.3 s for the diff here): the next ask
waits POLL_S, or SPACING times what the last one took, whichever is longer, so the watch holds
the engine at most 1 / (SPACING + 1) of the time. The paths it counts are bounded by the
limit itself: past `disk_mb` / PATH_BYTES of them, the container goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import docker.errors

from corral.sandboxes.docker.engine import Engine

POLL_S = 3.0  # the shortest wait between two asks
SPACING = 9  # the wait after an ask, in what that ask took, at least
PATH_BYTES = 4096  # what a changed path costs at least: a block of the engine's filesystem
LIMITS = "storage_mb in a Harbor task's task.toml; [resources] disk_mb in bundle.toml"


async def written(engine: Engine, container_id: str) -> tuple[int, list[dict]] | None:
    """What the container's writable layer holds: its bytes (`SizeRw`) and the paths it
    changed (the engine's diff), or None once the container is gone."""
    listed = await engine.call(engine.api.containers, all=True, size=True, filters={"id": container_id})
    if not listed:
        return None
    return listed[0].get("SizeRw") or 0, await engine.call(engine.api.diff, container_id) or []


def past_limit(size_rw: int, changed: int, limit_mb: int) -> str | None:
    """Why a layer of `size_rw` bytes over `changed` paths is past `limit_mb`, each path counted
    at PATH_BYTES at least, or None when it is not."""
    size_mb = (size_rw + PATH_BYTES * changed) >> 20
    if size_mb <= limit_mb:
        return None
    return (
        f"{size_mb} MB written to the container's filesystem ({changed} paths changed, each counted at "
        f"{PATH_BYTES // 1024} KB at least, a sparse file at its length), more than its limit of "
        f"{limit_mb} MB ({LIMITS})"
    )


async def watch_disk(
    engine: Engine,
    container_id: str,
    limit_mb: int,
    say: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Until the container is gone: kill it once its writable layer holds more than `limit_mb`,
    telling `say` why first. (`clock` and `sleep`: a test's own; patching the process's would
    stop every other event loop in it.)"""
    wait = POLL_S
    while True:
        await sleep(wait)
        began = clock()
        try:
            measured = await written(engine, container_id)
        except docker.errors.APIError:
            continue  # the engine is busy or restarting, or the container just went: the next ask tells
        finally:
            wait = max(POLL_S, SPACING * (clock() - began))
        if measured is None:
            return
        if (why := past_limit(measured[0], len(measured[1]), limit_mb)) is not None:
            say(f"the container was stopped for {why}")
            with contextlib.suppress(docker.errors.APIError):
                await engine.call(engine.api.kill, container_id)
            return
