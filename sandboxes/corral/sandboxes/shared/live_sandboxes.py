"""The sandboxes a provider's run has started, and their removals still under way.

The kubernetes, modal and local providers keep the same books: sandboxes handed to episodes,
sandboxes started for a warm pool and not yet taken, and removals (a pod's deletion, a
Modal sandbox's termination) that run to their end in the background whatever the closing
caller does. Closing the provider closes all of them and waits for every removal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic

from corral.sandboxes.base import ProviderStatus, SandboxSpec
from corral.sandboxes.shared.warm_pool import S, WarmPools

log = logging.getLogger("corral.sandboxes")


class LiveSandboxes(Generic[S]):
    """A run's sandboxes: `start_warm(spec)` starts one for a pool of `warm_pool` per spec
    (and must `add` it, as every start does)."""

    def __init__(self, warm_pool: int, start_warm: Callable[[SandboxSpec], Awaitable[S]]):
        self._start_warm = start_warm
        self.pools: WarmPools[S] = WarmPools(warm_pool, self._warm)
        self._running: set[S] = set()
        self._waiting: set[S] = set()  # started for a pool, not yet taken
        self._background: set[asyncio.Task] = set()

    def add(self, sandbox: S) -> None:
        """A sandbox this run started (for an episode or a pool)."""
        self._running.add(sandbox)

    def take(self, spec: SandboxSpec) -> S | None:
        """A warm sandbox of `spec` for an episode, or None when its pool has none ready."""
        sandbox = self.pools.take(spec)
        if sandbox is not None:
            self._waiting.discard(sandbox)
        return sandbox

    def closed(self, sandbox: S, removal: Awaitable[object] | None = None) -> None:
        """`sandbox` closed: forget it, and run its `removal` (if the provider has one left to
        do) to the end in the background."""
        self._running.discard(sandbox)
        self._waiting.discard(sandbox)
        if removal is not None:
            self.in_background(removal)

    def in_background(self, work: Awaitable[object]) -> None:
        """Run `work` to its end whatever its caller does; `close` waits for it."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._finished)

    async def settled(self) -> None:
        """Wait for the work in the background (removals, tags) to end."""
        await asyncio.gather(*list(self._background), return_exceptions=True)

    def status(self, kind: str, isolated: bool) -> ProviderStatus:
        return ProviderStatus(
            kind, isolated, live=len(self._running - self._waiting), warm=self.pools.ready(), warm_dry=self.pools.dry()
        )

    async def close(self) -> None:
        """Close the pools and every running sandbox, and wait for their removals."""
        await self.pools.close()
        await asyncio.gather(*(sandbox.close() for sandbox in list(self._running)))
        await self.settled()

    async def _warm(self, spec: SandboxSpec) -> S:
        sandbox = await self._start_warm(spec)
        self._waiting.add(sandbox)
        return sandbox

    def _finished(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a sandbox's removal (or other background call) failed: %s", task.exception())
