"""Warm pools: started sandboxes waiting for their episode, so a reset skips the start.

Any provider keeps them the same way (docker, modal, local). A warm sandbox is started and
its env has answered MCP's `ping` over the channel the episode will use: the interpreter has
started and the env module is loaded, so a reset pays one round trip, not a boot. A reset
takes one (or starts a cold one when none is ready); the pool starts replacements in the
background, several at once. A sandbox serves one episode, then is removed: never reused, so
no episode sees what another left behind.

A pool holds at least its configured size, and more while resets come faster than sandboxes
start: its target is the resets expected during one start (the recent reset rate times the
recent start time), up to GROWTH times the size. Resets that found it empty are counted
(`dry`), so an operator sees a pool too small for its load.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import time
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
GROWTH = 4  # a pool grows to at most this many times its configured size
RATE_WINDOW_S = 30.0  # the reset rate is measured over this window
PARALLEL_STARTS = 4  # starts in flight at once per pool: the engine's own work overlaps, within reason
S = TypeVar("S", bound=Sandbox)


class WarmPool(Generic[S]):
    """At least `size` started sandboxes of one env, made by `create`, refilled as they are taken."""

    def __init__(self, env_name: str, size: int, create: Callable[[], Awaitable[S]]):
        self.env_name = env_name
        self.size = size
        self.dry = 0  # takes that found no sandbox ready
        self._create = create
        self._ready: collections.deque[S] = collections.deque()
        self._starting = 0
        self._taken: collections.deque[float] = collections.deque()  # when each recent take happened
        self._start_s = 0.0  # the latest start's seconds, create to ping
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._filled_once = False
        self._starts: set[asyncio.Task[None]] = set()
        self._filler = asyncio.create_task(self._fill())

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def target(self) -> int:
        """How many to keep ready: the resets expected during one start, within [size, GROWTH * size]."""
        now = time.monotonic()
        while self._taken and self._taken[0] < now - RATE_WINDOW_S:
            self._taken.popleft()
        expected = math.ceil(len(self._taken) / RATE_WINDOW_S * self._start_s)
        return max(self.size, min(GROWTH * self.size, expected))

    def take(self) -> S | None:
        """A warm sandbox, or None when none is ready (the caller starts a cold one)."""
        self._taken.append(time.monotonic())
        self._wanted.set()
        while self._ready:
            sandbox = self._ready.popleft()
            if sandbox.alive:
                return sandbox
            asyncio.create_task(sandbox.close())  # its env died while waiting: never hand it out
        self.dry += 1
        return None

    async def close(self) -> None:
        self._filler.cancel()
        for start in self._starts:
            start.cancel()
        await asyncio.gather(self._filler, *self._starts, return_exceptions=True)
        waiting = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in waiting))

    async def _fill(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            if self._filled_once:
                await asyncio.sleep(REFILL_AFTER_S)
            self._filled_once = True
            missing = self.target - len(self._ready) - self._starting
            for _ in range(min(missing, PARALLEL_STARTS - self._starting)):
                self._starting += 1
                start = asyncio.create_task(self._start_one())
                self._starts.add(start)
                start.add_done_callback(self._starts.discard)

    async def _start_one(self) -> None:
        began = time.monotonic()
        try:
            sandbox = await self._started_and_ready()
        except SandboxError as error:
            log.warning("warm pool of env %s: %s; retrying in %.0fs", self.env_name, error, RETRY_AFTER_S)
            await asyncio.sleep(RETRY_AFTER_S)
        else:
            self._start_s = time.monotonic() - began
            self._ready.append(sandbox)
        finally:
            self._starting -= 1
            self._wanted.set()  # the next start, if the pool still wants one

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
        return self._by_env(lambda pool: pool.ready)

    def dry(self) -> dict[str, int]:
        """The resets that found their pool empty since it started, by env name."""
        return self._by_env(lambda pool: pool.dry)

    def _by_env(self, count: Callable[[WarmPool[S]], int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pool in self._pools.values():
            counts[pool.env_name] = counts.get(pool.env_name, 0) + count(pool)
        return counts

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
