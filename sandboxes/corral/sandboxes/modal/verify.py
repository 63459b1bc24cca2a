"""Command verifiers on Modal: shared.exec_verify's steps through Modal's exec, in a fresh sandbox
made like the agent's (the same app, image and limits, no network), tagged like it with
`corral.purpose=verify`, and terminated at the end.

Not verified against Modal's cloud (no credentials here): which user Modal's exec runs as,
and so whether the env's user could change the verifier's files, is Modal's choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import modal

from corral.sandboxes.shared.exec_verify import SLEEP, STDERR, STDOUT, Execs, Output, Stdin

STDIN_CHUNK = 1024 * 1024  # Modal buffers at most 2 MB of stdin between drains


class ModalExecs(Execs[modal.Sandbox]):
    """Fresh sandboxes like `agent`, made with Sandbox.create's keyword arguments `create`."""

    where = "on Modal"
    errors = (modal.exception.Error,)

    def __init__(self, agent: modal.Sandbox, create: dict):
        self.agent = agent
        self.create = create

    async def start(self, files_dir: str, lifetime_s: int) -> modal.Sandbox:
        options = {**self.create, "block_network": True, "timeout": lifetime_s}
        fresh = await modal.Sandbox.create.aio(SLEEP, str(lifetime_s), **options)
        try:
            await fresh.set_tags.aio({**await self.agent.get_tags.aio(), "corral.purpose": "verify"})
        except BaseException:
            await fresh.terminate.aio()
            raise
        return fresh  # its root is writable: files_dir is made by the command that fills it

    async def run(self, sandbox: modal.Sandbox, argv: Sequence[str], output: Output, stdin: Stdin | None = None) -> int:
        process = await sandbox.exec.aio(*argv, text=False)
        if stdin is not None:
            while chunk := stdin.file.read(STDIN_CHUNK):
                process.stdin.write(chunk)
                await process.stdin.drain.aio()
            process.stdin.write_eof()
            await process.stdin.drain.aio()

        async def collect(stream, channel: int) -> None:
            async for chunk in stream:
                output(channel, bytes(chunk))

        await asyncio.gather(collect(process.stdout, STDOUT), collect(process.stderr, STDERR))
        return await process.wait.aio()

    async def remove(self, sandbox: modal.Sandbox) -> None:
        await sandbox.terminate.aio()
