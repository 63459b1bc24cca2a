"""Timers for what runs once per tool call: an `Alarm` that a call arms and disarms, and the
`CallDeadline` built on one.

`asyncio.timeout` sets a timer on the loop as a call begins and cancels it as the call ends:
about a fortieth of a tool call's CPU in the server, for deadlines (a minute, by default)
that a call almost never reaches. An `Alarm` keeps one timer for all the armings of its
owner (an episode's calls, a socket's frames: one after another) and moves it only when it
fires: armed since, it waits for the latest arming's time, found then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType


class Alarm:
    """Calls `ring` once `seconds` have passed since the latest `arm(seconds)`, unless
    `disarm` came first."""

    def __init__(self, ring: Callable[[], None]) -> None:
        self._ring = ring
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # the loop's time at which the latest arming rings
        self._armed = False

    def arm(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._due, self._armed = loop.time() + seconds, True
        if self._timer is None or self._timer.when() > self._due:  # a timer set later than this arming's time
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self._due, self._fire)

    def disarm(self) -> None:
        self._armed = False

    def cancel(self) -> None:
        """Drop the timer (its owner's end: it holds nothing on the loop)."""
        self._armed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        if not self._armed:  # disarmed since: the next arming sets a timer of its own
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._due:  # set for an earlier arming: wait for the latest one's time
            self._timer = loop.call_at(self._due, self._fire)
            return
        self._armed = False
        self._ring()


class CallDeadline:
    """One deadline at a time, for the calls of one task (an episode's calls are sequential).
    Inside `async with deadline.within(seconds)`, it behaves as `asyncio.timeout` does:
    TimeoutError when the deadline passes, and a cancellation from outside (the client left)
    goes through as it came."""

    def __init__(self) -> None:
        self._alarm = Alarm(self._expire)
        self._task: asyncio.Task | None = None  # the task inside the block, if any
        self._seconds = 0.0
        self._expired = False  # the deadline cancelled the task inside the block

    def within(self, seconds: float) -> CallDeadline:
        """The block that follows is cut short `seconds` from now, with TimeoutError."""
        self._seconds = seconds
        return self

    async def __aenter__(self) -> None:
        self._task, self._expired = asyncio.current_task(), False
        self._alarm.arm(self._seconds)

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._alarm.disarm()
        task, self._task = self._task, None
        # As asyncio.timeout: the deadline's cancellation is taken back, and becomes TimeoutError
        # unless the task was also cancelled from outside.
        if self._expired and task is not None and task.uncancel() == 0 and kind is asyncio.CancelledError:
            raise TimeoutError from error

    def cancel(self) -> None:
        """Drop the timer (an ended episode's, so that it holds nothing on the loop)."""
        self._alarm.cancel()

    def _expire(self) -> None:
        if self._task is not None:
            self._expired = True
            self._task.cancel()
