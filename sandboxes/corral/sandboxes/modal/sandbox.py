"""One episode's env in a Modal Sandbox, reached over the sandbox's stdin and stdout.

The sandbox runs the env's command (corral's runtime gets the SDK over stdin first, as in a
docker container: modal.provider builds the image from the env folder alone). Modal carries
stdout and stderr as text; they are read by two tasks of this object into a bounded line
buffer and a bounded tail, so the protocol reads lines exactly as it does from a local pipe.
Command verifiers run in a fresh sandbox of the same image (shared.exec_verify, modal.verify).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

import modal

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.modal.verify import ModalExecs
from corral.sandboxes.shared.bootstrap import bootstrapped, sdk_payload
from corral.sandboxes.shared.streamed import StreamedSandbox

log = logging.getLogger("corral.sandboxes.modal")

STDIN_CHUNK = 1024 * 1024  # Modal buffers at most 2 MB of stdin between drains
ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
# A sandbox outlives a killed server by at most this long (its reaper, on restart, ends it sooner).
LIFETIME_S = 24 * 3600


def create_options(spec: SandboxSpec, app: modal.App, image: modal.Image) -> dict:
    """Sandbox.create's keyword arguments for `spec`: its app and image, its resources as hard
    limits, no network unless it opts in, a lifetime, and the environment."""
    cpus, memory = spec.resources.cpus, spec.resources.memory_mb
    return {
        "app": app,
        "image": image,
        "cpu": (cpus, cpus),
        "memory": (memory, memory),
        "block_network": spec.network == "none",
        "timeout": LIFETIME_S,
        "env": dict(ENVIRONMENT),
    }


class ModalSandbox(StreamedSandbox):
    """A started Modal Sandbox whose env process talks over its stdin and stdout; `on_close` is
    told when it closes (the provider's count of live sandboxes and its terminations)."""

    ended_message = "the sandbox's stdout closed"

    def __init__(
        self, sandbox: modal.Sandbox, spec: SandboxSpec, options: dict, on_close: Callable[[ModalSandbox], None]
    ):
        super().__init__(spec, on_close)
        self.sandbox = sandbox
        self.options = options  # Sandbox.create's keyword arguments: a verifier's sandbox is made like it
        self.readers += [asyncio.create_task(self._read_stdout()), asyncio.create_task(self._read_stderr())]

    @classmethod
    async def create(
        cls,
        app: modal.App,
        image: modal.Image,
        spec: SandboxSpec,
        tags: Mapping[str, str],
        on_close: Callable[[ModalSandbox], None],
    ) -> ModalSandbox:
        """Create a sandbox running `spec`'s command, tag it, hand its env the SDK. Raises SandboxError."""
        command = bootstrapped(spec.command) or spec.command
        options = create_options(spec, app, image)
        try:
            sandbox = await modal.Sandbox.create.aio(*command, **options)
        except modal.exception.Error as error:
            raise SandboxError(f"could not create a Modal sandbox for env {spec.env_name}: {error}") from None
        started = cls(sandbox, spec, options, on_close)
        try:
            # Tags, not names: the reaper finds a killed server's sandboxes by them.
            await sandbox.set_tags.aio(dict(tags))
            if bootstrapped(spec.command):
                await started.write(sdk_payload())
        except BaseException as error:
            await started.close()
            if isinstance(error, (modal.exception.Error, EOFError)):
                raise SandboxError(f"could not start the Modal sandbox of env {spec.env_name}: {error}") from None
            raise
        return started

    async def write(self, data: bytes) -> None:
        """Write to the env's stdin, in chunks Modal's buffer takes; EOFError once it is closed."""
        if self.ended.is_set():  # the env closed its stdout: gone, or past answering (Modal may still take stdin)
            raise EOFError("the sandbox's stdout closed")
        stdin = self.sandbox.stdin
        try:
            for start in range(0, len(data), STDIN_CHUNK):
                stdin.write(data[start : start + STDIN_CHUNK])
                await stdin.drain.aio()
        except (ValueError, modal.exception.Error) as error:  # Modal's "Stdin is closed", a finished sandbox
            raise EOFError(f"the sandbox's stdin is closed ({error})") from None

    def verifier_execs(self) -> tuple[ModalExecs, modal.Sandbox]:
        return ModalExecs(self.sandbox, self.options), self.sandbox

    async def _read_stdout(self) -> None:
        try:
            async for chunk in self.sandbox.stdout:
                await self.output.add_stdout(chunk.encode() if isinstance(chunk, str) else chunk)
        except modal.exception.Error as error:
            self.output.note(f"reading the sandbox's stdout failed: {error}")
        finally:
            self.output.end()

    async def _read_stderr(self) -> None:
        with contextlib.suppress(modal.exception.Error):
            async for chunk in self.sandbox.stderr:
                self.output.add_stderr(chunk.encode() if isinstance(chunk, str) else chunk)
