"""Commands run in a container through the engine's exec API, read on the event loop.

An exec's exit code comes from the engine (`exec_inspect`), never from anything the command
prints: what runs inside cannot forge it. Its output arrives on a multiplexed stream
(docker.stream) whose stdout is kept to a bounded tail and whose stderr tail is kept apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import docker.errors

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxProcess
from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.stream import MuxStream

EXIT_POLL_S = 0.02
EXIT_WAIT_S = 5.0  # the stream has ended; the engine records the exit code a moment later


class Exec(SandboxProcess):
    """One command started in a container; `stream` carries its stdin and output."""

    def __init__(self, engine: Engine, exec_id: str, stream: MuxStream):
        self.engine = engine
        self.exec_id = exec_id
        self.stream = stream

    @classmethod
    async def start(
        cls,
        engine: Engine,
        container: str,
        command: Sequence[str],
        *,
        user: str,
        stdin: bool = False,
        workdir: str | None = None,
        environment: Mapping[str, str] | None = None,
        merged: bool = False,
    ) -> Exec:
        """Start `command` as `user` (the image's working directory unless `workdir`; its
        stderr read with its stdout when `merged`); raise SandboxError when the engine refuses
        (the container is gone, the engine is down)."""
        api = engine.api
        try:
            exec_id = (
                await engine.call(
                    api.exec_create,
                    container,
                    list(command),
                    stdin=stdin,
                    user=user,
                    workdir=workdir,
                    environment=dict(environment or {}),
                )
            )["Id"]
            stream = await MuxStream.open(await engine.call(api.exec_start, exec_id, socket=True), merged=merged)
        except docker.errors.APIError as error:
            raise SandboxError(
                f"could not run {command[0]!r} in container {container[:12]}: {error.explanation or error}"
            ) from None
        return cls(engine, exec_id, stream)

    async def output(self, *, timeout_s: float, keep: int) -> tuple[int | None, str]:
        """Wait for the command to end within `timeout_s`: (its exit code, or None when it ran
        past the deadline; the last `keep` characters of its stdout). The stream is closed."""
        output = bytearray()
        try:
            async with asyncio.timeout(timeout_s):
                while chunk := await self.stream.read():
                    output += chunk
                    del output[: -keep * 4]  # characters are at most 4 bytes
            code = await self.exit_code()
        except TimeoutError:
            code = None
        finally:
            await self.stream.close()
        return code, output.decode("utf-8", errors="replace")[-keep:]

    async def exit_code(self) -> int | None:
        """The exit code the engine recorded, once the command has ended (None if it never does)."""
        api = self.engine.api
        async with asyncio.timeout(EXIT_WAIT_S):
            while True:
                state = await self.engine.call(api.exec_inspect, self.exec_id)
                if not state.get("Running"):
                    return state.get("ExitCode")
                await asyncio.sleep(EXIT_POLL_S)

    def stderr_tail(self, max_chars: int = 1000) -> str:
        return self.stream.stderr_tail(max_chars).strip()

    # As a SandboxProcess (DockerSandbox.exec): the stream's own operations.
    async def write(self, data: bytes) -> None:
        await self.stream.write(data)

    async def close_stdin(self) -> None:
        await self.stream.close_stdin()

    async def read(self) -> bytes:
        return await self.stream.read()

    async def close(self) -> None:
        await self.stream.close()
