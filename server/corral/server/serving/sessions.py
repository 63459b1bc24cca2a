"""Sessions: one episode at a time each, at most `max_concurrent_envs` of them.

A session is opened by a `/ws` socket, or by OpenEnv's `openenv/session/create` over
`POST /mcp` and then attached to a socket with `/ws?session_id=`. A socket's own session ends
with its socket; one created over HTTP outlives a dropped socket (its client may attach again)
until `openenv/session/close`, or until it has been left detached for `DETACHED_TTL_S`; one
that never played an episode, for `UNUSED_TTL_S` (a slot held by nobody is a slot taken from
every trainer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from corral.errors import CorralError
from corral.protocol.frames import (
    STEP_REWARD,
    CallTool,
    CallToolObservation,
    EpisodeState,
    ErrorCode,
    ListToolsObservation,
    ResetData,
    ResetObservation,
    StepAction,
)
from corral.server.episodes.episode import ServedEpisode
from corral.server.episodes.harness_run import DEFAULT_TEMPERATURE, EngineOptions, Harness
from corral.server.serving.served import ServedBundle
from corral.server.workers.seat import WorkerSeat

log = logging.getLogger("corral.server")

DETACHED_TTL_S = 600.0  # a session created over HTTP and left without a socket this long is closed
UNUSED_TTL_S = 60.0  # ... or this long, when it has never played an episode
REAP_EVERY_S = 30.0


class FrameError(CorralError):
    """A frame the session cannot act on; it becomes an `error` frame, and the session goes on."""

    def __init__(self, code: ErrorCode, message: str, **extra: object):
        super().__init__(message)
        self.code = code
        self.extra = extra


class ServedSession:
    """One client's session: the episode it plays now, if any."""

    def __init__(self, served: ServedBundle, session_id: str, *, over_http: bool):
        self.served = served
        self.session_id = session_id
        self.over_http = over_http  # created by openenv/session/create; outlives its socket
        self.attached = False
        self.closing = False  # openenv/session/close came while a socket was attached
        self.idle_since = time.monotonic()
        self.episode: ServedEpisode | None = None

    async def reset(self, data: ResetData) -> ResetObservation:
        """End the episode the session holds, if any, and start the task `data` names."""
        await self.close_episode()
        try:
            task = self.served.find_task(data)
        except LookupError as error:
            raise FrameError(ErrorCode.VALIDATION_ERROR, str(error)) from None
        limits, notes = self.served.limits_for(data, task)
        harness = self.served.harness_of(task)
        engine = EngineOptions(data.llm_url, data.model, data.temperature or DEFAULT_TEMPERATURE)
        self.episode = ServedEpisode(
            self.served,
            task,
            limits=limits,
            episode_id=data.episode_id,
            session_id=self.session_id,
            split=data.split or self.served.split_of(task.id),
            harness=None if harness is None else Harness(harness, engine),
        )
        opened = await self.episode.start()
        if notes:
            opened.metadata["limits"] = notes
        self._log_if_unscored()
        return opened

    async def step(self, action: StepAction) -> ListToolsObservation | CallToolObservation:
        """A step frame; the episode counts every one (OpenEnv's `step_count`), list_tools too."""
        if self.episode is not None:
            self.episode.step_count += 1
        if isinstance(action, CallTool):
            return await self.call_tool(action.tool_name, action.arguments)
        return self.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        observed = await self.running_episode().call_tool(name, arguments)
        self._log_if_unscored()
        return observed

    def list_tools(self) -> ListToolsObservation:
        """The episode's tools; before a reset, every tool the bundle offers."""
        if self.episode is None:
            return ListToolsObservation(tools=self.served.all_tools(), reward=STEP_REWARD)
        return self.episode.list_tools()

    def state(self) -> EpisodeState:
        return self.episode.state() if self.episode is not None else EpisodeState()

    def running_episode(self) -> ServedEpisode:
        if self.episode is None:
            raise FrameError(ErrorCode.EXECUTION_ERROR, "no episode on this session: send a reset first")
        if self.episode.done:
            raise FrameError(ErrorCode.EXECUTION_ERROR, "the episode has ended; send a reset to play the next task")
        return self.episode

    async def close_episode(self) -> None:
        if self.episode is not None:
            await self.episode.close()

    def _log_if_unscored(self) -> None:
        episode = self.episode
        if episode is not None and episode.done and episode.reward is None:
            log.warning("episode %s (task %s) ended unscored: %s", episode.episode_id, episode.task.id, episode.reason)


class CapacityReached(CorralError):
    """No room for a session (`forking`: none for a fork of that many copies, refused whole)."""

    def __init__(self, active: int, limit: int, forking: int | None = None):
        self.active = active
        self.limit = limit
        fix = (
            "retry once one closes (in a few seconds, as episodes end), serve the bundle with "
            "--max-concurrent-envs (or max_concurrent_envs=) at least the rollouts you generate at once"
        )
        if forking is not None:
            super().__init__(
                f"a fork of {forking} copies needs {forking} free sessions, and the server has "
                f"{max(limit - active, 0)} ({active} active of its limit of {limit}): the fork was refused "
                f"whole, nothing started; fork fewer, {fix}"
            )
            return
        super().__init__(
            f"the server is at its limit of {limit} sessions at once ({active} active), and each "
            f"environment holds one until its client closes it: {fix}, or generate fewer"
        )


class SessionRegistry:
    """Every open session, the limit on them, and the closing of those left behind. The limit
    is the host's: with `seat` (one worker of `corral serve --workers N`), every worker's
    sessions count against it."""

    def __init__(self, served: ServedBundle, limit: int, seat: WorkerSeat | None = None):
        self.served = served
        self.limit = limit
        self.seat = seat
        self.sessions: dict[str, ServedSession] = {}
        self._reaper: asyncio.Task | None = None

    def active(self) -> int:
        """Sessions open on the host: this process's, or every worker's."""
        return self.seat.host_sessions() if self.seat is not None else len(self.sessions)

    def open(self, *, over_http: bool = False) -> ServedSession:
        if (active := self.active()) >= self.limit:
            self.served.metrics.sessions_refused.inc()
            raise CapacityReached(active, self.limit)
        session_id = self.seat.mint() if self.seat is not None else uuid.uuid4().hex
        session = ServedSession(self.served, session_id, over_http=over_http)
        self.sessions[session.session_id] = session
        self._counted()
        return session

    def open_many(self, count: int) -> list[ServedSession]:
        """`count` sessions as if created over HTTP (a fork's copies: a client attaches to each by
        its id), all or none: CapacityReached when fewer than `count` are free."""
        if (active := self.active()) + count > self.limit:
            self.served.metrics.sessions_refused.inc()
            raise CapacityReached(active, self.limit, count)
        return [self.open(over_http=True) for _ in range(count)]

    def _counted(self) -> None:
        if self.seat is not None:
            self.seat.count_own(len(self.sessions))

    def attach(self, session_id: str) -> ServedSession:
        """The HTTP-created session a socket asks for; FrameError when it cannot have it."""
        session = self.sessions.get(session_id)
        if session is None or not session.over_http:
            raise FrameError(
                ErrorCode.SESSION_ERROR, f"Unknown session_id: {session_id}; create one with openenv/session/create"
            )
        if session.attached:
            raise FrameError(ErrorCode.SESSION_ERROR, f"Session {session_id} already has an attached WebSocket")
        session.attached = True
        return session

    async def detach(self, session: ServedSession) -> None:
        """A socket left its session: a socket's own session ends with it, one created over
        HTTP waits for its client (unless it was asked to close meanwhile)."""
        session.attached = False
        session.idle_since = time.monotonic()
        if not session.over_http or session.closing:
            await self.release(session)

    async def release(self, session: ServedSession) -> None:
        """Close the session's episode (tearing its sandbox down) and free its slot."""
        try:
            await session.close_episode()
        finally:
            self.sessions.pop(session.session_id, None)
            self._counted()

    def start_reaping(self) -> None:
        """Close HTTP-created sessions left detached too long (call on the serving loop)."""
        self._reaper = asyncio.create_task(self._reap())

    async def close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*(self.release(session) for session in list(self.sessions.values())))

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                ttl = DETACHED_TTL_S if session.episode is not None else min(UNUSED_TTL_S, DETACHED_TTL_S)
                if session.over_http and not session.attached and now - session.idle_since > ttl:
                    log.info(
                        "closing session %s: left without a socket for %.0fs%s",
                        session.session_id,
                        ttl,
                        "" if session.episode is not None else ", and no episode played",
                    )
                    await self.release(session)
