"""A bound on what an image run whole (a Harbor task's container) writes to its root.

Such a container's root is the engine's writable layer, on this machine's disk: docker bounds
it only on some storage drivers (overlay2 over xfs with project quotas; not ext4, not here),
so an agent could fill the env host's disk. The provider watches it instead: every POLL_S it
asks the engine for the layer's size (`SizeRw`, which counts bytes only) and for the paths it
changed, each counted at PATH_BYTES at least (a file takes a block and an inode however small:
200,000 empty files are no free lunch), and past the spec's `disk_mb` it kills the container
and says why in its stderr tail. The agent's episode then ends as any container
killed for a limit does (its own doing: the task's failure score). A watch can let an agent
write up to what the disk takes in POLL_S past the limit before it acts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import docker.errors

from corral.sandboxes.docker_engine import Engine

POLL_S = 3.0  # each ask walks the layer's files in the engine: seconds, not less
PATH_BYTES = 4096  # what a changed path costs at least: a block of the engine's filesystem


async def watch_disk(engine: Engine, container_id: str, limit_mb: int, say: Callable[[str], None]) -> None:
    """Until the container is gone: kill it once its writable layer holds more than `limit_mb`,
    telling `say` why first."""
    while True:
        await asyncio.sleep(POLL_S)
        try:
            listed = await engine.call(engine.api.containers, all=True, size=True, filters={"id": container_id})
            changed = len(await engine.call(engine.api.diff, container_id) or []) if listed else 0
        except docker.errors.APIError:
            continue  # the engine is busy or restarting, or the container just went: the next ask tells
        if not listed:
            return
        written_mb = ((listed[0].get("SizeRw") or 0) + PATH_BYTES * changed) >> 20
        if written_mb > limit_mb:
            say(
                f"the container was stopped for writing {written_mb} MB to its filesystem ({changed} paths changed, "
                f"each counted at {PATH_BYTES // 1024} KB at least), more than its limit of {limit_mb} MB "
                "(storage_mb in a Harbor task's task.toml; [resources] disk_mb in bundle.toml)"
            )
            with contextlib.suppress(docker.errors.APIError):
                await engine.call(engine.api.kill, container_id)
            return
