"""The instance lease: one live server per instance name on an engine.

A server's reaper removes every container of its instance, so two servers given the same
name would remove each other's. Before reaping, a server takes the lease: a tiny container
named `corral-<instance>-lease` whose PID 1 is `cat` reading the stdin that this server's
attach stream holds open. Container names are unique on an engine, so a second server's
create fails (409) and it refuses. The lease cannot outlive its server: when the server's
process ends, however it ends (SIGKILL included), the kernel closes its socket, `cat` reads
end-of-file and exits, and AutoRemove removes the container, so a restarted server finds the
name free again within a moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import docker.errors

from corral.errors import ConfigError, SandboxError
from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.stream import raw_socket

log = logging.getLogger("corral.sandboxes.docker")

FALLBACK_IMAGE = "debian:bookworm-slim"
FREED_WITHIN_S = 5.0  # a killed server's lease is gone this long after its death, at most
POLL_S = 0.1
START_ATTEMPTS = 3


class Lease:
    """This server's hold on its instance name; `release()` gives it up."""

    def __init__(self, engine: Engine, container: str, connection: socket.socket):
        self._engine = engine
        self._container = container
        # A plain socket, not a stream of an event loop: `corral serve` takes the lease on the
        # loop that opens the bundle, which is closed before the one that serves starts.
        self._connection = connection

    @staticmethod
    def name(instance: str) -> str:
        return f"corral-{instance}-lease"

    @classmethod
    async def take(cls, engine: Engine) -> Lease:
        """Hold the instance's lease; raise ConfigError when another live server holds it."""
        name = cls.name(engine.instance)
        image = await engine.call(_an_image, engine.api)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FREED_WITHIN_S
        failures = 0
        while True:
            try:
                return await cls._create(engine, name, image)
            except docker.errors.APIError as error:
                if error.status_code != 409:
                    # A busy engine sometimes fails a start ("cannot start a stopped process"):
                    # the container is removed, and a new one usually starts.
                    failures += 1
                    if failures >= START_ATTEMPTS:
                        raise SandboxError(
                            f"could not take the lease {name} on the Docker engine: {error.explanation or error}"
                        ) from None
                    log.warning("taking the lease %s failed (%s); trying again", name, error.explanation or error)
                    await engine.drain()
                    continue
            # The name is taken: by a live server, or by one that just died and whose lease is on
            # its way out, or by one killed between creating its lease and starting it (a created
            # container is never auto-removed): that one holds nothing, and goes.
            if await engine.call(_not_running, engine.api, name):
                engine.remove(name, name)
                await engine.drain()
            elif loop.time() > deadline:
                raise ConfigError(
                    f"another corral server holds the instance {engine.instance!r} on this Docker engine (its "
                    f"container {name} is running); stop that server, or serve this one with --instance OTHER_NAME "
                    "(or CORRAL_INSTANCE)"
                )
            await asyncio.sleep(POLL_S)

    @classmethod
    async def _create(cls, engine: Engine, name: str, image: str) -> Lease:
        api = engine.api
        host_config = api.create_host_config(
            auto_remove=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            mem_limit="16m",
            pids_limit=4,
        )
        container = (
            await engine.call(
                api.create_container,
                image,
                entrypoint=["cat"],
                command=[],
                user="65534:65534",
                stdin_open=True,
                name=name,
                labels={"corral.lease": engine.instance},
                host_config=host_config,
                use_config_proxy=False,
            )
        )["Id"]
        try:
            connection = raw_socket(
                await engine.call(api.attach_socket, container, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            )
            await engine.call(api.start, container)
        except BaseException:
            engine.remove(container, name)
            raise
        return cls(engine, container, connection)

    async def release(self) -> None:
        """End the connection (`cat` ends, AutoRemove removes it) and remove it, to be prompt."""
        with contextlib.suppress(OSError):
            self._connection.shutdown(socket.SHUT_RDWR)
        self._connection.close()
        self._engine.remove(self._container, self.name(self._engine.instance))


def _not_running(api: docker.APIClient, name: str) -> bool:
    """Whether the container `name` exists and was never started or has stopped (blocking)."""
    try:
        state = api.inspect_container(name)["State"]
    except docker.errors.NotFound:
        return False
    return state.get("Status") in ("created", "exited", "dead")


def _an_image(api: docker.APIClient) -> str:
    """An image on the engine with `cat` in it: an env image corral built, else Debian's
    (blocking). A server has one of them once it has built an env; none is pulled."""
    for image in api.images(filters={"label": "corral.env"}):
        if (image.get("Labels") or {}).get("corral.purpose") == "verify":
            continue  # a commit a verifier removes as soon as its tests have run (docker.whole_image.snapshot)
        # An image a rebuild left untagged is listed as `<none>:<none>`, which no create accepts.
        tags = [tag for tag in image.get("RepoTags") or [] if tag != "<none>:<none>"]
        if tags:
            return tags[0]
    if api.images(name=FALLBACK_IMAGE):
        return FALLBACK_IMAGE
    raise ConfigError(
        "the docker sandbox found no image to hold this server's instance lease with (an env image corral "
        f"built, or {FALLBACK_IMAGE}); build the bundle's images first: corral build BUNDLE"
    )
