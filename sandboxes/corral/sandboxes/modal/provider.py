"""The modal provider: each episode's env in a Modal Sandbox, in Modal's cloud.

- Credentials are Modal's own: `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET`, or the profile that
  `modal token set` writes to `~/.modal.toml` (`MODAL_PROFILE`, `MODAL_CONFIG_PATH`). Without
  them the provider refuses at once with the fix, before anything reaches the network.
- Images: each env's is built from its folder (its Dockerfile, the folder as the context,
  byte-code caches left out as docker's builds leave them), or is its prebuilt `image`. The
  built image's id is kept in a Modal Dict under the env's content digest (env_digest), so an
  unchanged env is found by id on every later start, never rebuilt; any change builds anew.
- Each sandbox gets the env's `[resources]` as hard limits (cpu, memory), no network unless the
  env opts in (`network = "egress"`), and the same stdio protocol and SDK as a docker container.
- Tags: every sandbox carries `corral.instance`, `corral.run` and `corral.env`, and an
  episode's its session and episode. A starting server takes its instance's lease (a heartbeat
  in a Modal Dict: a live server of the same name refuses the second) and terminates every
  sandbox tagged with its instance: what a killed server left. A killed server's sandboxes
  otherwise end at their lifetime (modal.sandbox.LIFETIME_S).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import modal
import modal.config

from corral.errors import ConfigError, ImageError, SandboxError
from corral.sandboxes.base import (
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.env_digest import context_digest, skipped
from corral.sandboxes.modal.sandbox import ModalSandbox
from corral.sandboxes.shared.live_sandboxes import LiveSandboxes

log = logging.getLogger("corral.sandboxes.modal")

APP_NAME = "corral-envs"
IMAGES = "corral-images"  # a Modal Dict: env content key -> built image id
LEASES = "corral-leases"  # a Modal Dict: instance -> {"run", "beat"}
LEASE_BEAT_S, LEASE_STALE_S = 10.0, 45.0


def credentials_missing() -> str | None:
    """Why Modal's client would have no credentials (None when it has some), read the way
    Modal reads them: the environment, then the active profile of ~/.modal.toml."""
    config = modal.config.config
    if config.get("token_id") and config.get("token_secret"):
        return None
    if config.get("oauth_refresh_token"):
        return None
    return (
        "--sandbox modal needs Modal credentials and found none: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
        f"(create a token with `modal token new`), or write a profile with `modal token set` "
        f"(read from {modal.config.user_config_path}; MODAL_PROFILE picks a profile)"
    )


def image_key(spec: SandboxSpec) -> str:
    """What an env's image is cached under: its prebuilt image's name, or its folder's digest."""
    if spec.image is not None:
        return f"prebuilt:{spec.image}"
    return f"{spec.env_name}:{context_digest(spec.context_dir, spec.dockerfile)}"


def env_image(spec: SandboxSpec) -> modal.Image:
    """The Modal image definition of `spec`: its prebuilt image, else its folder's Dockerfile
    with the folder as the build context (less what the content digest leaves out)."""
    if spec.image is not None:
        return modal.Image.from_registry(spec.image)
    dockerfile = spec.context_dir / spec.dockerfile
    if not dockerfile.is_file():
        raise ImageError(
            f"env {spec.env_name} has no {spec.dockerfile} in {spec.context_dir}; add one (FROM an image with "
            "python3), or name a prebuilt image with `image = ...` in env.toml"
        )
    return modal.Image.from_dockerfile(
        dockerfile, context_dir=spec.context_dir, ignore=lambda path: skipped(Path(path))
    )


class ModalProvider(SandboxProvider):
    """Starts each sandbox in Modal's cloud; see the module docstring."""

    kind = "modal"
    isolated = True

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, app_name: str = APP_NAME):
        if why := credentials_missing():
            raise ConfigError(why)
        # Without a name (a one-off `corral check`), a unique one: it must never reap a server's.
        self.named = instance is not None
        self.instance = instance or f"{socket.gethostname()}-once-{uuid.uuid4().hex[:8]}"
        self.run_id = uuid.uuid4().hex[:12]
        self.app_name = app_name
        self._app: modal.App | None = None
        self._images: dict[SandboxSpec, modal.Image] = {}
        self._live: LiveSandboxes[ModalSandbox] = LiveSandboxes(
            warm_pool, lambda spec: self._start(spec, {"corral.env": spec.env_name, "corral.pool": "warm"})
        )
        self._lease: asyncio.Task | None = None

    @property
    def tags(self) -> dict[str, str]:
        """The tags of every sandbox this run starts."""
        return {"corral.instance": self.instance, "corral.run": self.run_id}

    async def app(self) -> modal.App:
        if self._app is None:
            try:
                self._app = await modal.App.lookup.aio(self.app_name, create_if_missing=True)
            except modal.exception.Error as error:
                raise ConfigError(
                    f"--sandbox modal: Modal refused the app {self.app_name!r} ({error}); check the "
                    "credentials (MODAL_TOKEN_ID, MODAL_TOKEN_SECRET) and `modal profile current`"
                ) from None
        return self._app

    async def reap_leftovers(self) -> None:
        """Take the instance's lease (ConfigError when a live server holds it), then terminate
        every sandbox tagged with this instance."""
        if not self.named:
            return
        leases = modal.Dict.from_name(LEASES, create_if_missing=True)
        held = await leases.get.aio(self.instance)
        age = time.time() - held["beat"] if isinstance(held, dict) else None
        if age is not None and held.get("run") != self.run_id and age < LEASE_STALE_S:
            raise ConfigError(
                f"another corral server holds the instance {self.instance!r} on Modal (its lease in the Modal Dict "
                f"{LEASES} was renewed {age:.0f}s ago); stop that server, or serve this one with --instance "
                "OTHER_NAME (or CORRAL_INSTANCE)"
            )
        await leases.put.aio(self.instance, {"run": self.run_id, "beat": time.time()})
        self._lease = asyncio.create_task(self._renew(leases))
        await self._terminate_tagged({"corral.instance": self.instance})

    async def _renew(self, leases: modal.Dict) -> None:
        while True:
            await asyncio.sleep(LEASE_BEAT_S)
            with contextlib.suppress(modal.exception.Error):  # a missed beat is not yet a lost lease
                await leases.put.aio(self.instance, {"run": self.run_id, "beat": time.time()})

    async def _terminate_tagged(self, tags: Mapping[str, str]) -> int:
        app = await self.app()
        found = [sandbox async for sandbox in modal.Sandbox.list.aio(app_id=app.app_id, tags=dict(tags))]
        await asyncio.gather(*(sandbox.terminate.aio() for sandbox in found))
        if found:
            log.info("terminated %d Modal sandbox(es) tagged %s", len(found), dict(tags))
        return len(found)

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Find `spec`'s image by its content key, or build it (and keep its id under the key)."""
        started = time.monotonic()
        app, key = await self.app(), image_key(spec)
        images = modal.Dict.from_name(IMAGES, create_if_missing=True)
        built = False
        if image_id := await images.get.aio(key):
            image = modal.Image.from_id(image_id)
        else:
            progress(f"building the Modal image {key} for env {spec.env_name} from {spec.context_dir}")
            image = env_image(spec)
            try:
                await image.build.aio(app)
            except modal.exception.Error as error:
                raise ImageError(
                    f"building the Modal image of env {spec.env_name} ({spec.context_dir}) failed: {error}"
                ) from None
            await images.put.aio(key, image.object_id)
            built = True
        self._images[spec] = image
        return Prepared(spec.env_name, f"modal:{image.object_id}", built=built, seconds=time.monotonic() - started)

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started sandboxes ready for each spec (call on the serving loop)."""
        self._live.pools.start(specs)

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        labels = dict(labels or {})
        if (sandbox := self._live.take(spec)) is not None:
            # Unlike docker's labels, tags can change: the episode's go on in the background.
            tags = {**self.tags, "corral.env": spec.env_name, **labels}
            self._live.in_background(sandbox.sandbox.set_tags.aio(tags))
            return sandbox
        return await self._start(spec, {"corral.env": spec.env_name, **labels})

    async def _start(self, spec: SandboxSpec, tags: Mapping[str, str]) -> ModalSandbox:
        if spec not in self._images:  # never prepared (a one-off check, a test): prepare it now
            await self.prepare(spec)
        sandbox = await ModalSandbox.create(
            await self.app(), self._images[spec], spec, {**self.tags, **tags}, on_close=self._closed
        )
        self._live.add(sandbox)
        return sandbox

    def _closed(self, sandbox: ModalSandbox) -> None:
        self._live.closed(sandbox, sandbox.sandbox.terminate.aio())

    def status(self) -> ProviderStatus:
        return self._live.status(self.kind, self.isolated)

    async def check(self) -> None:
        """Modal answers for the app, or SandboxError says it does not."""
        try:
            await asyncio.wait_for(modal.App.lookup.aio(self.app_name), 10.0)
        except Exception as error:  # noqa: BLE001 - a timeout, a refused connection, an API error
            raise SandboxError(f"Modal did not answer for the app {self.app_name!r} ({type(error).__name__})") from None

    async def aclose(self) -> None:
        """Terminate every sandbox of this run: the pools', the episodes', any stragglers."""
        await self._live.close()
        if self._app is not None:
            with contextlib.suppress(modal.exception.Error):
                await self._terminate_tagged(self.tags)
        if self._lease is not None:
            self._lease.cancel()
            with contextlib.suppress(modal.exception.Error):
                leases = modal.Dict.from_name(LEASES)
                held = await leases.get.aio(self.instance)
                if isinstance(held, dict) and held.get("run") == self.run_id:  # not one a restart took over
                    await leases.pop.aio(self.instance)
