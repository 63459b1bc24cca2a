"""One episode: a task played in a fresh sandbox, from reset to the verifier's scores.

Each method returns the observation the client sees. An episode that ends early ends with
its reason in the observation, and its score decided by who caused the end (`endings.py`):
the agent's doing scores the task's failure score, the platform's is unscored (`reward:
null`). The sandbox is always closed when the episode ends. What it needs of the server (its
sandboxes, verifiers, limits, metrics) it asks of its runtime (`episodes.runtime`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import time
import uuid
from typing import Any

from corral.errors import SandboxError
from corral.protocol.catalog import END_TURN, RUN_AGENT
from corral.protocol.frames import (
    EPISODE_ENDED,
    STEP_REWARD,
    CallToolObservation,
    EpisodeState,
    Limits,
    ListToolsObservation,
    ResetObservation,
    ToolError,
)
from corral.protocol.outcomes import Cause, EpisodeStatus
from corral.protocol.records import EpisodeRecord, RecordedCall
from corral.protocol.rewards import pick_reward
from corral.server.bundles.format import Task
from corral.server.connection.base import EnvCallError, EnvConnection, EnvDied
from corral.server.episodes.alarms import CallDeadline
from corral.server.episodes.canary import judge
from corral.server.episodes.endings import ENDINGS, Ended, ending_observation
from corral.server.episodes.env_answers import field_of, refused, tool_answer
from corral.server.episodes.harness_run import Harness, play
from corral.server.episodes.runtime import EpisodeRuntime
from corral.server.episodes.scoring import Unscorable, command_verdicts, scores_of
from corral.server.metrics import Timed

log = logging.getLogger("corral.server")
# A call until its record is made: tool, arguments, observation, turn, seconds from the reset, seconds.
AnsweredCall = tuple[str, dict[str, Any], CallToolObservation, int, float, float]


class ServedEpisode:
    """One task played on one session, under `limits`, with what `runtime` serves it."""

    def __init__(
        self,
        runtime: EpisodeRuntime,
        task: Task,
        *,
        limits: Limits,
        episode_id: str | None = None,
        session_id: str = "",
        split: str | None = None,
        untouched: bool = False,
        harness: Harness | None = None,
    ):
        self.runtime = runtime
        self.harness = harness  # a harness env's: its agent runs to its end in run_agent
        self.untouched = untouched  # a replay judging another ending: not counted or recorded, failing as ours
        self.task = task
        self.split = split
        self.limits = limits
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.session_id = session_id
        self.turn = 1
        self.step_count = 0  # the session counts every step frame since the reset (OpenEnv's rule)
        self.status: EpisodeStatus | None = None  # set once the episode has ended
        self.scores: dict[str, float] = {}
        self.reward: float | None = None
        self.reason: str | None = None  # why it ended early
        self.cause: Cause | None = None  # what ended it, in a word: "scored", or one of endings.ENDINGS
        self.report: dict[str, Any] | None = None  # the env's final report, as the verifiers scored it
        self.tools = runtime.offered_tools(task)
        self._tool_names = frozenset(tool.name for tool in self.tools)
        self.tool_calls = 0
        self.calls: list[AnsweredCall] = []  # every call, answered: as models once it ends (one a call costs)
        self.seconds = dict.fromkeys(("start", "reset", "tools", "verify"), 0.0)  # by phase, for the log line
        self._began = time.monotonic()
        self._started_at = time.time()
        self._published = False  # the ended episode was counted, logged and recorded
        self._acting_since: float | None = None  # the agent's clock (task.time_budget_s) runs from the reset
        self._env: EnvConnection | None = None
        self._deadline = CallDeadline()  # the tool calls' (one timer for them all)

    @property
    def done(self) -> bool:
        return self.status is not None

    def state(self) -> EpisodeState:
        return EpisodeState(
            episode_id=self.episode_id,
            step_count=self.step_count,
            task_id=self.task.id,
            turn=self.turn,
            done=self.done,
            status=self.status,
            reason=self.reason,
        )

    async def start(self, *, copied: bool = False) -> ResetObservation:
        """Deploy the env, load the task, and open the first turn (within the reset deadline);
        `copied`: for a fork's copy, whose env resumes on the files copied in next (Env.resume)."""
        opened = await self._start(copied)
        self._publish()  # a reset that failed has ended the episode
        return opened

    async def _start(self, copied: bool) -> ResetObservation:
        labels = {"corral.session": self.session_id, "corral.episode": self.episode_id}
        opened = ResetObservation(
            task_id=self.task.id,
            episode_id=self.episode_id,
            system_prompt=self.task.system_prompt,
            prompt=self.task.prompt,
            turn=self.turn,
            offered_tools=self.tools,
            limits=self.limits,
            failure_score=self.task.failure_score,
        )
        metrics = self.runtime.metrics
        if not self.untouched:
            metrics.episodes_started.inc()
        try:
            async with asyncio.timeout(self.limits.reset_timeout_s), self.runtime.starts:
                with Timed(self.seconds, "start", metrics.sandbox_start):
                    self._env = await self.runtime.connect(self.task, labels)
                await self._env.initialize()
                await self._env.hook("corral/reset", {"task": self.task.args} | ({"copied": True} if copied else {}))
        except TimeoutError:
            reason = (
                f"the reset didn't finish within {self.limits.reset_timeout_s:g}s (deploying the env and "
                "loading the task); the episode ended unscored"
            )
            return await self._end_early(opened, reason, cause="reset_timeout")
        except (SandboxError, EnvCallError) as error:
            return await self._end_early(
                opened, f"the env could not start this task: {error}", cause="env_start_failed"
            )
        self._acting_since = time.monotonic()
        self.seconds["reset"] = self._acting_since - self._began
        metrics.reset.observe(self.seconds["reset"])
        return opened

    def list_tools(self) -> ListToolsObservation:
        return ListToolsObservation(tools=self.tools, reward=STEP_REWARD)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        """Run one of the turn's tools; `end_turn` ends the turn. The call, its answer and its
        timing go into the episode's record."""
        turn, began = self.turn, time.monotonic()
        try:
            observed = await self._call_tool(name, arguments)
        except Exception as error:  # what came out of the sandbox is the agent's to shape: judged by evidence
            if self.done:
                raise
            log.warning("episode %s: %s failed in corral", self.episode_id, name, exc_info=True)
            reason = f"corral could not handle what the env answered to {name}: {type(error).__name__}: {error}"
            observed = await self._end_early(CallToolObservation(tool_name=name), reason, cause="unreadable")
        self.calls.append((name, arguments, observed, turn, began - self._began, time.monotonic() - began))
        self._publish()
        return observed

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        if self._time_left() <= 0:
            return await self._out_of_time(name)
        if name == END_TURN:
            response = arguments.get("response", "")
            if not isinstance(response, str) or set(arguments) - {"response"}:
                return refused(name, "invalid_args", "end_turn takes one argument, response: a string")
            return await self.end_turn(response)
        if name == RUN_AGENT and self.harness is not None:
            return await play(self, self.harness)
        if name not in self._tool_names:
            offered = ", ".join(tool.name for tool in self.tools)
            return refused(name, "tool_not_found", f"no tool {name!r} in this turn; it offers: {offered}")
        size, most = len(json.dumps(arguments)), self.runtime.max_argument_bytes
        if size > most:
            return refused(
                name,
                "invalid_args",
                f"the arguments are {size:,} bytes of JSON, more than the "
                f"{most:,} this server takes; send less (e.g. write a file in several calls)",
            )
        assert self._env is not None
        failed = CallToolObservation(tool_name=name)
        self.tool_calls += 1
        deadline = min(self.limits.tool_timeout_s, self._time_left())
        try:
            async with self._deadline.within(deadline):
                with Timed(self.seconds, "tools", self.runtime.metrics.tool_call):
                    result = await self._env.call_tool(name, arguments)
        except TimeoutError:
            if self._time_left() <= 0:
                return await self._out_of_time(name)
            reason = (
                f"{name} didn't answer within {self.limits.tool_timeout_s:g}s, and the episode ended, "
                "since what the call does may still be under way"
            )
            return await self._end_early(failed, reason, cause="tool_timeout", error_type="timeout")
        except EnvDied as error:
            return await self._end_early(
                failed, f"the env died during {name}: {error}", cause="env_died", error_type="transport_error"
            )
        except EnvCallError as error:
            return refused(name, "execution_error", str(error))
        return tool_answer(name, result, self.runtime.max_output_chars)

    async def end_turn(self, response: str) -> CallToolObservation:
        """Hand the reply to the env; open its next turn, or score the episode."""
        assert self._env is not None
        ended = CallToolObservation(tool_name=END_TURN, result=EPISODE_ENDED)
        try:
            async with asyncio.timeout(min(self.limits.reset_timeout_s, self._time_left())):
                reply = await self._env.hook("corral/end_turn", {"response": response})
                next_prompt = field_of(reply, "prompt", str)
                if next_prompt is not None and self.turn < min(self.task.max_turns, self.limits.max_turns or math.inf):
                    self.turn += 1
                    return CallToolObservation(
                        tool_name=END_TURN, result=next_prompt, prompt=next_prompt, turn=self.turn, reward=STEP_REWARD
                    )
                report = field_of(await self._env.hook("corral/report"), "report", dict) or {}
        except TimeoutError:
            if self._time_left() <= 0:
                return await self._out_of_time(END_TURN)
            reason = f"the env did not answer the reply within {self.limits.reset_timeout_s:g}s (end_turn)"
            return await self._end_early(ended, reason, cause="turn_timeout", error_type="timeout")
        except EnvDied as error:
            return await self._end_early(
                ended, f"the env died at the end of the turn: {error}", cause="env_died", error_type="transport_error"
            )
        except EnvCallError as error:
            return await self._end_early(ended, f"the env's own code failed: {error}", cause="env_hook_failed")
        return await self._score(ended, report)

    async def _score(self, ended: CallToolObservation, report: dict[str, Any] | None) -> CallToolObservation:
        """Score what the agent left (`scoring.py`), then pick the reward from the scores."""
        assert self._env is not None
        verifying = time.monotonic()
        self.report = report
        timeout_s = self.limits.reset_timeout_s
        try:
            verdicts = await command_verdicts(self.runtime, self.task, self._env.sandbox, timeout_s=timeout_s)
            await self._close_sandbox()  # the command verifiers were the last to need it
            scored = await scores_of(self.runtime, self.task, report, verdicts, timeout_s=timeout_s)
        except Unscorable as failed:
            return await self._end_early(ended, failed.reason, cause=failed.cause, error_type=failed.error_type)
        self.seconds["verify"] = time.monotonic() - verifying
        self.runtime.metrics.verify.observe(self.seconds["verify"])
        scores = scored.scores
        if scored.verifier_output:  # where a user debugging a 0 looks first: what the tests printed, cut short
            ended.metadata["verifier_output"] = scored.verifier_output
        try:
            reward = pick_reward(scores, self.runtime.reward)
        except Exception as error:  # noqa: BLE001 - RewardError, or anything a user's reward function raises
            return await self._end_early(
                ended, f"the reward could not be computed from {scores}: {error}", cause="reward_failed", scores=scores
            )
        self.status, self.scores, self.reward = "scored", scores, reward
        self._ended("scored")
        outcome = {"reward": reward, "status": "scored", "scores": scores}
        return ending_observation(ended, outcome, "scored", self.seconds)

    async def _out_of_time(self, name: str) -> CallToolObservation:
        """The agent's time budget is spent: its turn is over, and what it left is scored."""
        budget = f"the agent's time budget of {self.task.time_budget_s:g}s ran out"
        self.reason = budget
        ended = CallToolObservation(tool_name=name, result=f"{EPISODE_ENDED} {budget}")
        report = None
        if self._env is not None and self._env.idle:  # a tool cut short still holds the env: no report
            with contextlib.suppress(TimeoutError, SandboxError, EnvCallError):
                async with asyncio.timeout(self.limits.tool_timeout_s):
                    report = field_of(await self._env.hook("corral/report"), "report", dict) or {}
        scored = await self._score(ended, report)
        return scored.model_copy(update={"reason": scored.reason or budget})

    async def close(self) -> None:
        """Tear the sandbox down; the episode keeps its outcome (one left before it ended, by a
        new reset or its session closing, ends unscored as `abandoned`). Safe to call twice."""
        if not self.done:
            self.status = "unscored"
            self.reason = "the episode was left before it ended (a new reset, or its session closed)"
            self._ended("abandoned")
        self._publish()
        await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        """Close the sandbox (once) within the reset deadline: a close that hangs (an engine that
        stopped answering, a container slow to remove) or fails (on files the agent left) must
        not hold or break the episode's end, whose outcome is already decided; it is given up
        and logged."""
        self._deadline.cancel()
        if self._env is not None:
            env, self._env = self._env, None
            try:
                async with asyncio.timeout(self.limits.reset_timeout_s):
                    await env.close()
            except TimeoutError:
                log.warning(
                    "episode %s: closing its sandbox took more than %gs; given up",
                    self.episode_id,
                    self.limits.reset_timeout_s,
                )
            except Exception:  # what the agent left may make a close fail: it takes no verdict either
                log.warning("episode %s: closing its sandbox failed; given up", self.episode_id, exc_info=True)

    async def _end_early(
        self,
        observed: Ended,
        reason: str,
        *,
        cause: Cause,
        error_type: str = "execution_error",
        scores: dict[str, float] | None = None,
    ) -> Ended:
        """End the episode before it could be scored, with the reason where the client and the
        logs see it: the task's failure score if the agent caused it, else unscored (endings.py)."""
        await self._close_sandbox()  # first: an untouched replay may need the room
        canary = (
            None
            if self.untouched
            else functools.partial(  # the same task, played untouched: made if needed
                ServedEpisode,
                self.runtime,
                self.task,
                limits=self.limits,
                session_id=self.session_id,
                split=self.split,
                untouched=True,
            )
        )
        ending, by_agent, reason = await judge(ENDINGS[cause], reason, self.runtime, canary)
        reward = self.task.failure_score if by_agent else None
        self.status, self.reward, self.reason = ("failed" if by_agent else "unscored"), reward, reason
        self.scores = scores or {}
        self._ended(ending.cause)
        update: dict[str, Any] = {"reward": reward, "status": self.status, "scores": self.scores, "reason": reason}
        if isinstance(observed, CallToolObservation):
            update.update(result=None, error=ToolError(error_type=error_type, message=reason))  # type: ignore[arg-type]
        return ending_observation(observed, update, ending.cause, self.seconds)

    def _time_left(self) -> float:
        """Seconds left of the agent's time budget (infinity without one)."""
        if self.task.time_budget_s is None or self._acting_since is None:
            return math.inf
        return self.task.time_budget_s - (time.monotonic() - self._acting_since)

    def _ended(self, cause: Cause) -> None:
        """Note what ended the episode (once); `_publish` reports it once the call that ended it is recorded."""
        if self.cause is not None:
            return
        self.cause = cause
        self.seconds["total"] = time.monotonic() - self._began

    def _publish(self) -> None:
        """Count the ended episode, write its log line and, when recording, its record (once)."""
        if self.cause is None or self._published or self.untouched:
            return
        self._published = True
        self.runtime.episode_ended(
            EpisodeRecord(
                episode_id=self.episode_id,
                session_id=self.session_id,
                bundle=self.runtime.name,
                task_id=self.task.id,
                split=self.split,
                system_prompt=self.task.system_prompt,
                prompt=self.task.prompt,
                tools=self.tools,
                turns=self.turn,
                calls=[
                    RecordedCall.of(name, arguments, observed, turn=turn, started_s=started_s, seconds=seconds)
                    for name, arguments, observed, turn, started_s, seconds in self.calls
                ],
                tool_calls=self.tool_calls,
                status=self.status or "unscored",
                cause=self.cause,
                reason=self.reason,
                scores=dict(self.scores),
                reward=self.reward,
                sandbox=self.runtime.sandbox_kind(),
                seconds=dict(self.seconds),
                started_at=self._started_at,
                report=self.report,
            )
        )
