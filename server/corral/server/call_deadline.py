"""A deadline for an episode's tool calls, one after another, that costs no timer per call.

`asyncio.timeout` sets a timer on the loop as a call begins and cancels it as the call ends:
about a fortieth of a tool call's CPU in the server, for deadlines (a minute, by default)
that a call almost never reaches. A `CallDeadline` keeps one timer for all of an episode's
calls and moves it only when it fires: a call that began since waits for its own deadline,
found then. Inside `async with deadline.within(seconds)`, it behaves as `asyncio.timeout`
does: TimeoutError when the deadline passes, and a cancellation from outside (the client
left) goes through as it came.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class CallDeadline:
    """One deadline at a time, for the calls of one task (an episode's calls are sequential)."""

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None  # the task inside the block, if any
        self._due = 0.0  # the loop's time when the call inside the block is late
        self._seconds = 0.0
        self._expired = False  # the deadline cancelled the task inside the block

    def within(self, seconds: float) -> CallDeadline:
        """The block that follows is cut short `seconds` from now, with TimeoutError."""
        self._seconds = seconds
        return self

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        self._task, self._expired = asyncio.current_task(), False
        self._due = loop.time() + self._seconds
        if self._timer is None or self._timer.when() > self._due:  # a timer set later than this call's deadline
            self.cancel()
            self._timer = loop.call_at(self._due, self._fire)

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        task, self._task = self._task, None
        # As asyncio.timeout: the deadline's cancellation is taken back, and becomes TimeoutError
        # unless the task was also cancelled from outside.
        if self._expired and task is not None and task.uncancel() == 0 and kind is asyncio.CancelledError:
            raise TimeoutError from error

    def cancel(self) -> None:
        """Drop the timer (an ended episode's, so that it holds nothing on the loop)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        if self._task is None:  # between calls: the next one sets a timer of its own
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._due:  # set for an earlier call: wait for this one's deadline
            self._timer = loop.call_at(self._due, self._fire)
            return
        self._expired = True
        self._task.cancel()
