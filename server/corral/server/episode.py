"""One episode: a task played in a fresh sandbox, from reset to the verifier's scores.

Each method returns the observation the client sees. A missed deadline, a dead env or a
failed verifier ends the episode unscored (`reward: null`) with the reason in the
observation; the sandbox is always closed when the episode ends.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, get_args

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
from corral.server.served import ServedBundle
from corral.server.verifiers import CommandScore, run_command_verifier, score_episode

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
        self.tools = served.offered_tools(task)
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
        try:
            async with asyncio.timeout(self.limits.reset_timeout_s):
                sandbox = await self.served.provider.start(sandbox_spec(env), labels)
                self._env = EnvProcess(sandbox)
                await self._env.initialize(corral_runtime=env.config.entry is not None)
                await self._env.hook("corral/reset", {"task": self.task.args})
        except TimeoutError:
            reason = (f"the reset didn't finish within {self.limits.reset_timeout_s:g}s (deploying the env and "
                      "loading the task); the episode ended unscored")
            return await self._unscored(opened, reason)
        except (SandboxError, EnvCallError) as error:
            return await self._unscored(opened, f"the env could not start this task: {error}")
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
        assert self._env is not None
        failed = CallToolObservation(tool_name=name)
        try:
            async with asyncio.timeout(self.limits.tool_timeout_s):
                result = await self._env.call("tools/call", {"name": name, "arguments": arguments})
        except TimeoutError:
            reason = (f"{name} didn't answer within {self.limits.tool_timeout_s:g}s, and the episode ended, "
                      "since what the call does may still be under way")
            return await self._unscored(failed, reason, error_type="timeout")
        except EnvDied as error:
            return await self._unscored(failed, f"the env died during {name}: {error}", error_type="transport_error")
        except EnvCallError as error:
            return _refused(name, "execution_error", str(error))
        return _tool_answer(name, result)

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
                report = ((await self._env.hook("corral/report")) or {}).get("report", {})
                checked = await self._run_command_verifiers()
                await self.close()
                python_verifiers = {sid: name for sid, name in self.task.verifiers.items() if name in self.served.verifiers}
                scores = await asyncio.to_thread(
                    score_episode, self.task.model_dump(), report, python_verifiers, self.served.verifiers
                )
        except TimeoutError:
            reason = (f"end_turn didn't finish within {self.limits.reset_timeout_s:g}s (the env's next turn and "
                      "the verifiers); the episode ended unscored")
            return await self._unscored(ended, reason, error_type="timeout")
        except (SandboxError, EnvCallError, VerifierError) as error:
            return await self._unscored(ended, f"the episode could not be scored: {error}")
        scores.update({score_id: result.score for score_id, result in checked.items()})
        if checked:  # where a user debugging a 0 looks first: what the tests printed, cut short
            ended.metadata["verifier_output"] = {score_id: result.output_tail for score_id, result in checked.items()}
        try:
            reward = pick_reward(scores, self.served.reward)
        except Exception as error:  # noqa: BLE001 - RewardError, or anything a user's reward function raises
            return await self._unscored(ended, f"the reward could not be computed from {scores}: {error}", scores=scores)
        self.status, self.scores, self.reward = "scored", scores, reward
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
        """Tear the sandbox down; the episode keeps its outcome. Safe to call twice."""
        if self._env is not None:
            env, self._env = self._env, None
            await env.sandbox.close()

    async def _unscored(self, observed: ResetObservation | CallToolObservation, reason: str, *,
                        error_type: str = "execution_error", scores: dict[str, float] | None = None) -> Any:
        """End the episode unscored, with the reason where the client and the logs see it."""
        await self.close()
        self.status, self.scores, self.reward, self.reason = "unscored", scores or {}, None, reason
        update: dict[str, Any] = {"done": True, "reward": None, "status": "unscored", "scores": self.scores, "reason": reason}
        if isinstance(observed, CallToolObservation):
            update.update(result=None, error=ToolError(error_type=error_type, message=reason))  # type: ignore[arg-type]
        return observed.model_copy(update=update)


def _refused(name: str, error_type: str, message: str) -> CallToolObservation:
    """A call the episode turned down; the model reads why, and the episode goes on."""
    return CallToolObservation(tool_name=name, error=ToolError(error_type=error_type, message=message),  # type: ignore[arg-type]
                               reward=STEP_REWARD)


def _tool_answer(name: str, result: dict[str, Any]) -> CallToolObservation:
    """An MCP tools/call result as the client's observation: its text (or, with none, its
    structured content as JSON); a failure says which kind, as corral's runtime names it."""
    result = result if isinstance(result, dict) else {}
    parts = result.get("content") or []
    text = "".join(part.get("text", "") for part in parts if isinstance(part, dict) and part.get("type") == "text")
    if not text and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], separators=(",", ":"))
    if result.get("isError"):
        kind = (result.get("_meta") or {}).get(jsonrpc.ERROR_TYPE_META)
        return _refused(name, kind if kind in ERROR_TYPES else "execution_error", text)
    return CallToolObservation(tool_name=name, result=text, reward=STEP_REWARD)
