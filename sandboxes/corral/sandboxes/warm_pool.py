"""Warm pools: started sandboxes waiting for their episode, so a reset skips the start.

Any provider keeps them the same way (docker, modal, local). A warm sandbox is started and
its env has answered MCP's `ping` over the channel the episode will use: the interpreter has
started and the env module is loaded, so a reset pays one round trip, not a boot. A reset
takes one (or starts a cold one when none is ready); the pool starts a replacement in the
background. A sandbox serves one episode, then is removed: never reused, so no episode sees
what another left behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from corral.env import jsonrpc
from corral.errors import SandboxError
from corral.sandboxes.base import Sandbox, SandboxSpec

log = logging.getLogger("corral.sandboxes")

RETRY_AFTER_S = 5.0  # after a failed start (the engine or cloud is busy or down) the pool waits this long
READY_TIMEOUT_S = 120.0
PING_ID = "corral-warm"
# A taken sandbox's replacement starts this long after: starting one is the engine's (or the
# cloud's) heavy work, which would otherwise share the cores with the reset that took it
# (a warm reset on 2 cores: 2.6 ms with the refill at once, 0.7 ms with it deferred).
REFILL_AFTER_S = 0.05
S = TypeVar("S", bound=Sandbox)


class WarmPool(Generic[S]):
    """`size` started sandboxes of one env, made by `create`, refilled as they are taken."""

    def __init__(self, env_name: str, size: int, create: Callable[[], Awaitable[S]]):
        self.env_name = env_name
        self.size = size
        self._create = create
        self._ready: collections.deque[S] = collections.deque()
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._filled_once = False
        self._filler = asyncio.create_task(self._fill())

    @property
    def ready(self) -> int:
        return len(self._ready)

    def take(self) -> S | None:
        """A warm sandbox, or None when none is ready (the caller starts a cold one)."""
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
            if len(self._ready) < self.size and self._filled_once:
                await asyncio.sleep(REFILL_AFTER_S)
            self._filled_once = True
            while len(self._ready) < self.size:
                try:
                    self._ready.append(await self._started_and_ready())
                except SandboxError as error:
                    log.warning("warm pool of env %s: %s; retrying in %.0fs", self.env_name, error, RETRY_AFTER_S)
                    await asyncio.sleep(RETRY_AFTER_S)

    async def _started_and_ready(self) -> S:
        sandbox = await self._create()
        try:
            await _answers_ping(sandbox, self.env_name)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


class WarmPools(Generic[S]):
    """A provider's warm pools: `size` started sandboxes of each spec, made by `create(spec)`."""

    def __init__(self, size: int, create: Callable[[SandboxSpec], Awaitable[S]]):
        self.size = size
        self._create = create
        self._pools: dict[SandboxSpec, WarmPool[S]] = {}

    def start(self, specs: Iterable[SandboxSpec]) -> None:
        """Start filling a pool for each spec not pooled yet (call on the serving loop)."""
        if self.size < 1:
            return
        for spec in specs:
            if spec not in self._pools:
                self._pools[spec] = WarmPool(spec.env_name, self.size, functools.partial(self._create, spec))

    def take(self, spec: SandboxSpec) -> S | None:
        """A warm sandbox of `spec`, or None when none is ready (or it has no pool)."""
        pool = self._pools.get(spec)
        return pool.take() if pool is not None else None

    def ready(self) -> dict[str, int]:
        """The warm sandboxes waiting, by env name."""
        warm: dict[str, int] = {}
        for pool in self._pools.values():
            warm[pool.env_name] = warm.get(pool.env_name, 0) + pool.ready
        return warm

    async def close(self) -> None:
        await asyncio.gather(*(pool.close() for pool in self._pools.values()))
        self._pools.clear()


async def _answers_ping(sandbox: Sandbox, env_name: str) -> None:
    """Wait for the env's reply to MCP's `ping` (a server without `ping` answers with an error,
    which proves as much); raise SandboxError when it dies or stays silent."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await sandbox.send_line(jsonrpc.encode(jsonrpc.request(PING_ID, "ping")))
            while True:
                with contextlib.suppress(jsonrpc.RpcError):  # not JSON: not the reply
                    if jsonrpc.decode(await sandbox.read_line()).get("id") == PING_ID:
                        return
    except (EOFError, TimeoutError) as error:
        tail = sandbox.stderr_tail(1000).strip()
        raise SandboxError(f"a warm sandbox of env {env_name} never answered: {error!r}; {tail}") from None
