"""Warm pools: started containers waiting for their episode, so a reset skips the cold start.

A warm container is created, attached and started, and its env has answered MCP's `ping`:
Python has started and the env module is loaded, so a reset pays one round trip, not a boot. A reset takes one (or starts a cold one when none is ready); the pool
starts a replacement in the background. A container serves one episode, then is removed:
never reused, so no episode sees what another left behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable

from corral.env import jsonrpc
from corral.errors import SandboxError
from corral.sandboxes.docker_sandbox import DockerSandbox

log = logging.getLogger("corral.sandboxes.docker")

RETRY_AFTER_S = 5.0  # after a failed start (the engine is busy or down) the pool waits this long
READY_TIMEOUT_S = 120.0
PING_ID = "corral-warm"


class WarmPool:
    """`size` started containers of one env, made by `create`, refilled as they are taken."""

    def __init__(self, env_name: str, size: int, create: Callable[[], Awaitable[DockerSandbox]]):
        self.env_name = env_name
        self.size = size
        self._create = create
        self._ready: collections.deque[DockerSandbox] = collections.deque()
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._filler = asyncio.create_task(self._fill())

    @property
    def ready(self) -> int:
        return len(self._ready)

    def take(self) -> DockerSandbox | None:
        """A warm container, or None when none is ready (the caller starts a cold one)."""
        while self._ready:
            sandbox = self._ready.popleft()
            self._wanted.set()
            if sandbox.alive:
                return sandbox
            asyncio.create_task(sandbox.close())  # its env died while waiting: never hand it out
        return None

    async def close(self) -> None:
        self._filler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._filler
        waiting = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in waiting))

    async def _fill(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while len(self._ready) < self.size:
                try:
                    self._ready.append(await self._started_and_ready())
                except SandboxError as error:
                    log.warning("warm pool of env %s: %s; retrying in %.0fs", self.env_name, error, RETRY_AFTER_S)
                    await asyncio.sleep(RETRY_AFTER_S)

    async def _started_and_ready(self) -> DockerSandbox:
        sandbox = await self._create()
        try:
            await _answers_ping(sandbox)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


async def _answers_ping(sandbox: DockerSandbox) -> None:
    """Wait for the env's reply to MCP's `ping` (a server without `ping` answers with an error,
    which proves as much); raise SandboxError when it dies or stays silent."""
    await sandbox.send_line(jsonrpc.encode(jsonrpc.request(PING_ID, "ping")))
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            while True:
                with contextlib.suppress(jsonrpc.RpcError):  # not JSON: not the reply
                    if jsonrpc.decode(await sandbox.read_line()).get("id") == PING_ID:
                        return
    except (EOFError, TimeoutError) as error:
        tail = sandbox.stderr_tail(1000).strip()
        raise SandboxError(f"a warm container of env {sandbox.spec.env_name} never answered: {error!r}; {tail}") from None
