"""One episode: a task played in a fresh sandbox, from reset to the verifier's scores.

Each method returns the observation the client sees. A missed deadline, a dead env or a
failed verifier ends the episode unscored (`reward: null`) with the reason in the
observation; the sandbox is always closed when the episode ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, get_args

from prometheus_client import Histogram

from corral.client.catalog import END_TURN
from corral.client.protocol import (
    EPISODE_ENDED,
    STEP_REWARD,
    CallToolObservation,
    EpisodeState,
    EpisodeStatus,
    Limits,
    ListToolsObservation,
    ResetObservation,
    ToolError,
)
from corral.client.rewards import pick_reward
from corral.env import jsonrpc
from corral.errors import SandboxError, VerifierError
from corral.server.bundle_format import Task
from corral.server.checks import sandbox_spec
from corral.server.envproc import EnvCallError, EnvDied, EnvProcess
from corral.server.metrics import EpisodeRecord
from corral.server.served import ServedBundle
from corral.server.verifiers import CommandScore, run_command_verifier

ERROR_TYPES = get_args(ToolError.model_fields["error_type"].annotation)


class ServedEpisode:
    """One task played on one session, under `limits`."""

    def __init__(self, served: ServedBundle, task: Task, *, limits: Limits, episode_id: str | None = None,
                 session_id: str = ""):
        self.served = served
        self.task = task
        self.limits = limits
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.session_id = session_id
        self.turn = 1
        self.step_count = 0  # the session counts every step frame since the reset (OpenEnv's rule)
        self.status: EpisodeStatus | None = None  # set once the episode has ended
        self.scores: dict[str, float] = {}
        self.reward: float | None = None
        self.reason: str | None = None  # why it ended unscored
        self.cause: str | None = None  # what ended it, in a word: one of CAUSES
        self.tools = served.offered_tools(task)
        self.tool_calls = 0
        self.seconds = {"start": 0.0, "reset": 0.0, "tools": 0.0, "verify": 0.0}  # by phase, for the log line
        self._began = time.monotonic()
        self._env: EnvProcess | None = None

    @property
    def done(self) -> bool:
        return self.status is not None

    def state(self) -> EpisodeState:
        return EpisodeState(episode_id=self.episode_id, step_count=self.step_count, task_id=self.task.id,
                            turn=self.turn, done=self.done, status=self.status, reason=self.reason)

    async def start(self) -> ResetObservation:
        """Deploy the env, load the task, and open the first turn (within the reset deadline)."""
        env = self.served.bundle.envs[self.task.env]
        labels = {"corral.session": self.session_id, "corral.episode": self.episode_id}
        opened = ResetObservation(task_id=self.task.id, episode_id=self.episode_id, system_prompt=self.task.system_prompt,
                                  prompt=self.task.prompt, turn=self.turn, offered_tools=self.tools, limits=self.limits)
        metrics = self.served.metrics
        metrics.episodes_started.inc()
        try:
            async with asyncio.timeout(self.limits.reset_timeout_s), self.served.starts:
                with _timed(self.seconds, "start", metrics.sandbox_start):
                    sandbox = await self.served.provider.start(sandbox_spec(env), labels)
                self._env = EnvProcess(sandbox)
                await self._env.initialize(corral_runtime=env.config.entry is not None)
                await self._env.hook("corral/reset", {"task": self.task.args})
        except TimeoutError:
            reason = (f"the reset didn't finish within {self.limits.reset_timeout_s:g}s (deploying the env and "
                      "loading the task); the episode ended unscored")
            return await self._unscored(opened, reason, cause="reset_timeout")
        except (SandboxError, EnvCallError) as error:
            return await self._unscored(opened, f"the env could not start this task: {error}", cause="env_start_failed")
        self.seconds["reset"] = time.monotonic() - self._began
        metrics.reset.observe(self.seconds["reset"])
        return opened

    def list_tools(self) -> ListToolsObservation:
        return ListToolsObservation(tools=self.tools, reward=STEP_REWARD)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        """Run one of the turn's tools; `end_turn` ends the turn."""
        if name == END_TURN:
            response = arguments.get("response", "")
            if not isinstance(response, str) or set(arguments) - {"response"}:
                return _refused(name, "invalid_args", "end_turn takes one argument, response: a string")
            return await self.end_turn(response)
        if name not in {tool.name for tool in self.tools}:
            offered = ", ".join(tool.name for tool in self.tools)
            return _refused(name, "tool_not_found", f"no tool {name!r} in this turn; it offers: {offered}")
        size, most = len(json.dumps(arguments)), self.served.options.max_argument_bytes
        if size > most:
            return _refused(name, "invalid_args", f"the arguments are {size:,} bytes of JSON, more than the "
                            f"{most:,} this server takes; send less (e.g. write a file in several calls)")
        assert self._env is not None
        failed = CallToolObservation(tool_name=name)
        self.tool_calls += 1
        try:
            async with asyncio.timeout(self.limits.tool_timeout_s):
                with _timed(self.seconds, "tools", self.served.metrics.tool_call):
                    result = await self._env.call("tools/call", {"name": name, "arguments": arguments})
        except TimeoutError:
            reason = (f"{name} didn't answer within {self.limits.tool_timeout_s:g}s, and the episode ended, "
                      "since what the call does may still be under way")
            return await self._unscored(failed, reason, cause="tool_timeout", error_type="timeout")
        except EnvDied as error:
            return await self._unscored(failed, f"the env died during {name}: {error}", cause="env_died",
                                        error_type="transport_error")
        except EnvCallError as error:
            return _refused(name, "execution_error", str(error))
        return _tool_answer(name, result, self.served.options.max_output_chars)

    async def end_turn(self, response: str) -> CallToolObservation:
        """Hand the reply to the env; open its next turn, or score the episode.

        Scoring: the env's report, then the command verifiers inside the still-open sandbox
        (each within its own timeout, all within the end_turn deadline), then the sandbox
        closes and the Python verifiers grade the report outside it.
        """
        assert self._env is not None
        ended = CallToolObservation(tool_name=END_TURN, result=EPISODE_ENDED)
        try:
            async with asyncio.timeout(self.limits.reset_timeout_s):
                reply = await self._env.hook("corral/end_turn", {"response": response})
                next_prompt = (reply or {}).get("prompt")
                if next_prompt is not None and self.turn < self.task.max_turns:
                    self.turn += 1
                    return CallToolObservation(tool_name=END_TURN, result=next_prompt, prompt=next_prompt,
                                               turn=self.turn, reward=STEP_REWARD)
                verifying = time.monotonic()
                report = ((await self._env.hook("corral/report")) or {}).get("report", {})
                checked = await self._run_command_verifiers()
                await self._close_sandbox()
                python_verifiers = {sid: name for sid, name in self.task.verifiers.items() if name in self.served.bundle.verifiers}
                scores = await self.served.verifiers.score(self.task.model_dump(), report, python_verifiers)
                self.seconds["verify"] = time.monotonic() - verifying
                self.served.metrics.verify.observe(self.seconds["verify"])
        except TimeoutError:
            reason = (f"end_turn didn't finish within {self.limits.reset_timeout_s:g}s (the env's next turn and "
                      "the verifiers); the episode ended unscored")
            return await self._unscored(ended, reason, cause="end_turn_timeout", error_type="timeout")
        except (SandboxError, EnvCallError, VerifierError) as error:
            return await self._unscored(ended, f"the episode could not be scored: {error}", cause="scoring_failed")
        scores.update({score_id: result.score for score_id, result in checked.items()})
        if checked:  # where a user debugging a 0 looks first: what the tests printed, cut short
            ended.metadata["verifier_output"] = {score_id: result.output_tail for score_id, result in checked.items()}
        try:
            reward = pick_reward(scores, self.served.reward)
        except Exception as error:  # noqa: BLE001 - RewardError, or anything a user's reward function raises
            return await self._unscored(ended, f"the reward could not be computed from {scores}: {error}",
                                        cause="reward_failed", scores=scores)
        self.status, self.scores, self.reward = "scored", scores, reward
        self._ended("scored")
        return ended.model_copy(update={"done": True, "reward": reward, "status": "scored", "scores": scores})

    async def _run_command_verifiers(self) -> dict[str, CommandScore]:
        """The task's command verifiers, one after another, in the sandbox the agent used."""
        assert self._env is not None
        checked: dict[str, CommandScore] = {}
        bundle = self.served.bundle
        for score_id, name in self.task.verifiers.items():
            config = bundle.command_verifiers.get(name)
            if config is not None:
                checked[score_id] = await run_command_verifier(self._env.sandbox, bundle.root, name, config, self.task.id)
        return checked

    async def close(self) -> None:
        """Tear the sandbox down; the episode keeps its outcome (one left before it ended, by a
        new reset or its session closing, ends unscored as `abandoned`). Safe to call twice."""
        if not self.done:
            self.status, self.reason = "unscored", "the episode was left before it ended (a new reset, or its session closed)"
            self._ended("abandoned")
        await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            await env.sandbox.close()

    async def _unscored(self, observed: ResetObservation | CallToolObservation, reason: str, *, cause: str,
                        error_type: str = "execution_error", scores: dict[str, float] | None = None) -> Any:
        """End the episode unscored, with the reason where the client and the logs see it."""
        self.status, self.scores, self.reward, self.reason = "unscored", scores or {}, None, reason
        self._ended(cause)
        await self._close_sandbox()
        update: dict[str, Any] = {"done": True, "reward": None, "status": "unscored", "scores": self.scores, "reason": reason}
        if isinstance(observed, CallToolObservation):
            update.update(result=None, error=ToolError(error_type=error_type, message=reason))  # type: ignore[arg-type]
        return observed.model_copy(update=update)


    def _ended(self, cause: str) -> None:
        """Count the ending and write the episode's log line (once)."""
        if self.cause is not None:
            return
        self.cause = cause
        self.seconds["total"] = time.monotonic() - self._began
        self.served.metrics.episode_ended(EpisodeRecord(
            episode_id=self.episode_id, session_id=self.session_id, task_id=self.task.id, status=self.status or "unscored",
            cause=cause, reward=self.reward, reason=self.reason, tool_calls=self.tool_calls, seconds=dict(self.seconds),
        ))


@contextlib.contextmanager
def _timed(seconds: dict[str, float], phase: str, histogram: Histogram) -> Iterator[None]:
    """Add the block's duration to `seconds[phase]` and observe it in `histogram`."""
    began = time.monotonic()
    try:
        yield
    finally:
        took = time.monotonic() - began
        seconds[phase] += took
        histogram.observe(took)


def _refused(name: str, error_type: str, message: str) -> CallToolObservation:
    """A call the episode turned down; the model reads why, and the episode goes on."""
    return CallToolObservation(tool_name=name, error=ToolError(error_type=error_type, message=message),  # type: ignore[arg-type]
                               reward=STEP_REWARD)


def _tool_answer(name: str, result: dict[str, Any], max_chars: int) -> CallToolObservation:
    """An MCP tools/call result as the client's observation: its text (or, with none, its
    structured content as JSON); a failure says which kind, as corral's runtime names it."""
    result = result if isinstance(result, dict) else {}
    parts = result.get("content") or []
    text = "".join(part.get("text", "") for part in parts if isinstance(part, dict) and part.get("type") == "text")
    if not text and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], separators=(",", ":"))
    text = _cut(text, max_chars)
    if result.get("isError"):
        kind = (result.get("_meta") or {}).get(jsonrpc.ERROR_TYPE_META)
        return _refused(name, kind if kind in ERROR_TYPES else "execution_error", text)
    return CallToolObservation(tool_name=name, result=text, reward=STEP_REWARD)


def _cut(text: str, max_chars: int) -> str:
    """`text`, or its head and tail with a note of what was left out when it is longer than `max_chars`."""
    if len(text) <= max_chars:
        return text
    note = f"\n[... {len(text) - max_chars:,} characters cut: the answer was {len(text):,}, the server keeps {max_chars:,} ...]\n"
    half = max(0, (max_chars - len(note)) // 2)
    return text[:half] + note + text[len(text) - half:]
