"""Sessions: one per WebSocket, one episode at a time each, at most `max_concurrent_envs`.

A `Session` turns typed client frames into episode calls and replies; the `SessionRegistry`
holds the limit and closes every session's episode on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from corral.client.protocol import (
    CallToolAction,
    ErrorCode,
    McpFrame,
    ResetFrame,
    StepFrame,
)
from corral.server.episode import Episode
from corral.server.served import ServedBundle

log = logging.getLogger("corral.server")


class FrameError(Exception):
    """A frame the session cannot act on; becomes an `error` frame, and the session goes on."""

    def __init__(self, code: ErrorCode, message: str, **extra: Any):
        super().__init__(message)
        self.code = code
        self.extra = extra


class Session:
    def __init__(self, served: ServedBundle):
        self.served = served
        self.session_id = uuid.uuid4().hex[:12]
        self.episode: Episode | None = None

    async def reset(self, frame: ResetFrame) -> dict[str, Any]:
        """End the episode the session holds, if any, and start the task the frame names."""
        await self.close_episode()
        data = frame.data
        try:
            task = self.served.find_task(data)
        except LookupError as error:
            raise FrameError(ErrorCode.VALIDATION_ERROR, str(error)) from None
        self.episode = Episode(
            self.served,
            task,
            tool_timeout_s=data.tool_timeout_s or self.served.tool_timeout_s,
            reset_timeout_s=data.reset_timeout_s or self.served.reset_timeout_s,
            episode_id=data.episode_id,
            session_id=self.session_id,
        )
        reply = await self.episode.start()
        self._log_if_ended()
        return {"type": "observation", "data": reply}

    async def step(self, frame: StepFrame) -> dict[str, Any]:
        episode = self._running_episode()
        if isinstance(frame.data, CallToolAction):
            reply = await episode.call_tool(frame.data.tool_name, frame.data.arguments)
            self._log_if_ended()
        else:
            tools = [tool.as_openenv() for tool in self.served.offered_tools(episode.task)]
            reply = {"observation": {"tools": tools, "metadata": {}}, "reward": None, "done": False}
        return {"type": "observation", "data": reply}

    def state(self) -> dict[str, Any]:
        if self.episode is None:
            return {"type": "state", "data": {"episode_id": None, "step_count": 0}}
        return {"type": "state", "data": self.episode.state()}

    async def mcp(self, frame: McpFrame) -> dict[str, Any]:
        """MCP's `tools/list` and `tools/call` over the session's episode, as JSON-RPC."""
        request = frame.data
        request_id = request.get("id")
        method = request.get("method")
        params = request.get("params") or {}

        def reply(**body: Any) -> dict[str, Any]:
            return {"type": "mcp", "data": {"jsonrpc": "2.0", "id": request_id, **body}}

        if method not in ("tools/list", "tools/call"):
            return reply(error={"code": -32601, "message": f"unknown method {method!r}; use tools/list or tools/call"})
        try:
            episode = self._running_episode()
        except FrameError as error:
            return reply(error={"code": -32000, "message": str(error)})
        if method == "tools/list":
            return reply(result={"tools": [tool.as_mcp() for tool in self.served.offered_tools(episode.task)]})
        if not isinstance(params.get("name"), str) or not isinstance(params.get("arguments", {}), dict):
            return reply(error={"code": -32602, "message": "tools/call needs params {name: str, arguments: object}"})
        observed = await episode.call_tool(params["name"], params.get("arguments", {}))
        self._log_if_ended()
        fields = observed["observation"]
        is_error = fields.get("error") is not None or fields.get("metadata", {}).get("is_error", False)
        return reply(result={
            "content": [{"type": "text", "text": fields.get("result", "")}],
            "isError": is_error,
            "structuredContent": {"reward": observed["reward"], "done": observed["done"], **fields},
        })

    async def close_episode(self) -> None:
        if self.episode is not None:
            await self.episode.close()

    def _running_episode(self) -> Episode:
        if self.episode is None:
            raise FrameError(ErrorCode.EXECUTION_ERROR, "no episode on this session: send a reset first")
        if self.episode.done:
            raise FrameError(ErrorCode.EXECUTION_ERROR, "the episode has ended; send a reset to play the next task")
        return self.episode

    def _log_if_ended(self) -> None:
        episode = self.episode
        if episode is not None and episode.outcome is not None and episode.outcome.status == "error":
            log.warning("episode %s (task %s) ended unscored: %s", episode.episode_id, episode.task.id, episode.outcome.error)


class CapacityReached(Exception):
    def __init__(self, active: int, limit: int):
        self.active = active
        self.limit = limit
        super().__init__(
            f"the server is at its limit of {limit} sessions at once ({active} active), and each "
            "environment holds one: serve the bundle with --max-concurrent-envs (or "
            "max_concurrent_envs=) at least the rollouts you generate at once, or generate fewer"
        )


class SessionRegistry:
    def __init__(self, served: ServedBundle, limit: int):
        self.served = served
        self.limit = limit
        self.sessions: dict[str, Session] = {}
        self._lock = asyncio.Lock()

    async def open(self) -> Session:
        async with self._lock:
            if len(self.sessions) >= self.limit:
                raise CapacityReached(len(self.sessions), self.limit)
            session = Session(self.served)
            self.sessions[session.session_id] = session
            return session

    async def release(self, session: Session) -> None:
        """Close the session's episode (tearing its sandbox down) and free its slot."""
        try:
            await session.close_episode()
        finally:
            self.sessions.pop(session.session_id, None)

    async def close_all(self) -> None:
        await asyncio.gather(*(self.release(session) for session in list(self.sessions.values())))
