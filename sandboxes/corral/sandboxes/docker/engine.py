"""The Docker engine as the docker provider, its sandboxes and its warm pools share it.

One `Engine` holds the client (a connection pool), the thread pool that blocking engine calls
run on (create, start, remove, exec: sized for hundreds of episodes starting at once), the
container removals started in the background, and this server's labels.

Every container carries labels naming its server instance (`corral.instance`, stable across
restarts of one server, e.g. `host-8000`) and run (`corral.run`, new each start). The reaper:
a starting server takes its instance's lease (docker.lease) and removes every container of
its instance (what a killed run left), a stopping one removes its run's, and closing a sandbox
force-removes its container at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import docker
import docker.errors

from corral.errors import SandboxError

log = logging.getLogger("corral.sandboxes.docker")
T = TypeVar("T")

ENGINE_THREADS = 128
ENGINE_TIMEOUT_S = 600  # a build step may stay silent for minutes
PING_TIMEOUT_S = 2.0
REAP_THREADS = 16
REMOVE_RETRY_S = 1.0
REMOVAL_UNDER_WAY_S = 60.0  # how long another removal of the container (the engine's own) may take
REMOVAL_POLL_S = 0.05


def engine_answers() -> bool:
    """Whether a Docker engine (DOCKER_HOST, else the local socket) answers a ping within
    PING_TIMEOUT_S."""
    try:
        client = docker.from_env(timeout=PING_TIMEOUT_S)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure means: no engine to use
        return False
    finally:
        client.close()


class Engine:
    """One server run's connection to the engine; see the module docstring for the reaper."""

    def __init__(self, *, instance: str | None = None, client: docker.DockerClient | None = None):
        # pooled for many threads: one connection per engine thread at most
        self.client = client or docker.from_env(timeout=ENGINE_TIMEOUT_S, max_pool_size=ENGINE_THREADS)
        # Without a name (a one-off `corral check`), a unique one: it must never reap a server's.
        self.named = instance is not None
        self.instance = instance or f"{socket.gethostname()}-once-{uuid.uuid4().hex[:8]}"
        self.run_id = uuid.uuid4().hex[:12]
        self._executor = ThreadPoolExecutor(ENGINE_THREADS, thread_name_prefix="corral-docker")
        self._removals: set[Future] = set()
        self._removals_lock = threading.Lock()

    @property
    def api(self) -> docker.APIClient:
        return self.client.api

    @property
    def labels(self) -> dict[str, str]:
        """The labels of every container this run starts."""
        return {"corral.instance": self.instance, "corral.run": self.run_id}

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking engine call on the engine's own threads."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    def remove(self, container: str, name: str) -> None:
        """Start force-removing `container` (an id or name) on the engine threads at once, so
        no cancelled caller can stop it; `drain` waits for every removal started."""
        self.in_background(f"container {name}", remove_container, self.api, container)

    def in_background(self, what: str, removal: Callable[..., None], *args: Any) -> None:
        """Start `removal(*args)` (a blocking cleanup of `what`) on the engine threads at once,
        so no cancelled caller can stop it; `drain` waits for it, and a failure is logged."""
        future = self._executor.submit(removal, *args)
        with self._removals_lock:  # the callback runs on an engine thread
            self._removals.add(future)

        def done(finished: Future) -> None:
            with self._removals_lock:
                self._removals.discard(finished)
            if finished.exception() is not None:
                log.warning("could not remove %s: %s", what, finished.exception())

        future.add_done_callback(done)

    async def drain(self) -> None:
        """Wait until every removal started so far has finished (failed ones are logged)."""
        with self._removals_lock:
            removals = list(self._removals)
        await asyncio.gather(*(asyncio.wrap_future(removal) for removal in removals), return_exceptions=True)

    def reap(self, labels: Mapping[str, str]) -> int:
        """Force-remove every container carrying all of `labels`, then every volume (a Harbor
        task's keeper's, docker.whole_image.keeper) no container uses any more (blocking); how many
        containers went."""
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        found = self.api.containers(all=True, filters=filters)
        with ThreadPoolExecutor(REAP_THREADS, thread_name_prefix="corral-reap") as threads:
            failures = [f for f in threads.map(self._try_remove, found) if f]
        if failures:
            raise SandboxError(f"could not remove {len(failures)} container(s): {failures[0]}")
        if found:
            log.info("removed %d container(s) labelled %s", len(found), dict(labels))
        for volume in self.api.volumes(filters=filters).get("Volumes") or []:
            try:
                self.api.remove_volume(volume["Name"])
            except docker.errors.APIError as error:  # in use by a container that is going: its removal takes it
                log.info("left volume %s: %s", volume["Name"], error.explanation or error)
        return len(found)

    def _try_remove(self, container: dict) -> str | None:
        try:
            remove_container(self.api, container["Id"])
        except docker.errors.APIError as error:
            return f"{container['Names'][0]}: {error}"
        return None

    async def close(self) -> None:
        """Wait for the removals under way, remove whatever of this run is left, disconnect."""
        await self.drain()
        try:
            await self.call(self.reap, self.labels)
        finally:
            self._executor.shutdown(wait=False)
            self.client.close()


def remove_container(api: docker.APIClient, container: str, attempts: int = 3) -> None:
    """Force-remove a container (killing it first), returning once it is gone; one gone already
    is fine (blocking).

    The engine can give up killing a container whose processes fork as fast as they die (a
    fork bomb at its pids limit); the kill converges, so the removal is tried again. A removal
    under way already (the engine's own, of a container that exited) answers 409 while the
    container is still listed: it is asked again until the engine answers that it is gone.
    """
    under_way_until = time.monotonic() + REMOVAL_UNDER_WAY_S
    attempt = 1
    while True:
        try:
            api.remove_container(container, force=True, v=True)  # its anonymous volumes too
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as error:
            if error.status_code == 409 and time.monotonic() < under_way_until:
                time.sleep(REMOVAL_POLL_S)
                continue
            if attempt == attempts:
                raise
            attempt += 1
            time.sleep(REMOVE_RETRY_S)


def container_name(instance: str, env_name: str, labels: Mapping[str, str]) -> str:
    """`corral-<instance>-<env>-<session>-<episode>` for an episode's container."""
    session, episode = labels.get("corral.session"), labels.get("corral.episode")
    tail = (
        f"{session}-{episode}"
        if session and episode
        else f"{labels.get('corral.purpose', 'env')}-{uuid.uuid4().hex[:8]}"
    )
    return _safe_name(f"corral-{instance}-{env_name}-{tail}")


def warm_name(instance: str, env_name: str) -> str:
    """`corral-<instance>-<env>-warm-<random>` for a warm pool's container."""
    return _safe_name(f"corral-{instance}-{env_name}-warm-{uuid.uuid4().hex[:8]}")


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)
