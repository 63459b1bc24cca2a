"""One episode: a task played in a fresh sandbox, from reset to the verifier's scores.

Each method returns the observation the client sees. A missed deadline, a dead env or a
failed verifier ends the episode unscored (`reward: null`) with the reason in the
observation; the sandbox is always closed when the episode ends.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from corral.client.protocol import END_TURN, EPISODE_ENDED, Outcome, ToolError
from corral.client.rewards import pick_reward
from corral.sandboxes import SandboxError
from corral.server.bundle import Task
from corral.server.checks import sandbox_spec
from corral.server.envproc import EnvCallError, EnvDied, EnvProcess
from corral.server.served import ServedBundle
from corral.server.verifiers import CommandScore, VerifierError, run_command_verifier, score_episode

METHOD_NOT_FOUND = -32601  # an MCP-only env without corral's reset/end_turn/report hooks


def observation(fields: dict[str, Any], *, reward: float | None = None, done: bool = False) -> dict[str, Any]:
    """OpenEnv's observation payload."""
    return {"observation": {**fields, "metadata": fields.get("metadata", {})}, "reward": reward, "done": done}


class Episode:
    def __init__(
        self,
        served: ServedBundle,
        task: Task,
        *,
        tool_timeout_s: float,
        reset_timeout_s: float,
        episode_id: str | None = None,
        session_id: str = "",
    ):
        self.served = served
        self.task = task
        self.tool_timeout_s = tool_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.session_id = session_id
        self.turn = 1
        self.step_count = 0
        self.outcome: Outcome | None = None
        self.offered = {tool.name for tool in served.offered_tools(task)}
        self._env: EnvProcess | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "task_id": self.task.id,
            "turn": self.turn,
            "done": self.done,
            "outcome": self.outcome.model_dump() if self.outcome else None,
        }

    async def start(self) -> dict[str, Any]:
        """Deploy the env, load the task, and open the first turn (within the reset deadline)."""
        labels = {"corral.session": self.session_id, "corral.episode": self.episode_id}
        try:
            async with asyncio.timeout(self.reset_timeout_s):
                sandbox = await self.served.provider.start(sandbox_spec(self._env_config(), labels))
                self._env = EnvProcess(sandbox)
                await self._env.initialize(await_reply=self._env_config().config.entry is None)
                await self._optional_call("corral/reset", {"task": self.task.args})
        except TimeoutError:
            return await self._fail(
                f"the reset didn't finish within {self.reset_timeout_s:g}s (deploying the env and "
                "loading the task); the episode ended unscored"
            )
        except (SandboxError, EnvDied, EnvCallError) as error:
            return await self._fail(f"the env could not start this task: {error}")
        return observation({
            "task_id": self.task.id,
            "episode_id": self.episode_id,
            "system_prompt": self.task.system_prompt,
            "prompt": self.task.prompt,
            "turn": self.turn,
            "tools": [tool.as_openenv() for tool in self.served.offered_tools(self.task)],
        })

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one of the turn's tools; `end_turn` ends the turn."""
        self.step_count += 1
        if name == END_TURN:
            response = arguments.get("response", "")
            if not isinstance(response, str) or set(arguments) - {"response"}:
                return self._tool_error(name, "invalid_args", "end_turn takes one argument, response: a string")
            return await self.end_turn(response)
        if name not in self.offered:
            return self._tool_error(
                name, "tool_not_found", f"no tool {name!r} in this turn; it offers: {', '.join(sorted(self.offered))}"
            )
        assert self._env is not None
        try:
            async with asyncio.timeout(self.tool_timeout_s):
                result = await self._env.call("tools/call", {"name": name, "arguments": arguments})
        except TimeoutError:
            return await self._fail(
                f"{name} didn't answer within {self.tool_timeout_s:g}s, and the episode ended, "
                "since what the call does may still be under way",
                tool_name=name,
                error_type="timeout",
            )
        except EnvDied as error:
            return await self._fail(f"the env died during {name}: {error}", tool_name=name, error_type="transport_error")
        except EnvCallError as error:
            return self._tool_error(name, "execution_error", str(error))
        text = "".join(part.get("text", "") for part in result.get("content", []) if part.get("type") == "text")
        return observation({
            "tool_name": name,
            "result": text,
            "error": None,
            "metadata": {"is_error": bool(result.get("isError"))},
        })

    async def end_turn(self, response: str) -> dict[str, Any]:
        """Hand the reply to the env; open its next turn, or score the episode.

        Scoring: the env's report, then the command verifiers inside the still-open sandbox
        (each within its own timeout, all within the end_turn deadline), then the sandbox
        closes and the Python verifiers grade the report outside it.
        """
        assert self._env is not None
        try:
            async with asyncio.timeout(self.reset_timeout_s):
                reply = await self._optional_call("corral/end_turn", {"response": response})
                next_prompt = (reply or {}).get("prompt")
                if next_prompt is not None and self.turn < self.task.max_turns:
                    self.turn += 1
                    return observation(
                        {"tool_name": END_TURN, "result": next_prompt, "error": None, "prompt": next_prompt, "turn": self.turn}
                    )
                report = ((await self._optional_call("corral/report")) or {}).get("report", {})
                checked = await self._run_command_verifiers()
                await self.close()
                python_verifiers = {sid: name for sid, name in self.task.verifiers.items() if name in self.served.verifiers}
                scores = await asyncio.to_thread(
                    score_episode, self.task.model_dump(), report, python_verifiers, self.served.verifiers
                )
        except TimeoutError:
            return await self._fail(
                f"end_turn didn't finish within {self.reset_timeout_s:g}s (the env's next turn and the "
                "verifiers); the episode ended unscored",
                tool_name=END_TURN,
                error_type="timeout",
            )
        except (EnvDied, EnvCallError, VerifierError, SandboxError) as error:
            return await self._fail(f"the episode could not be scored: {error}", tool_name=END_TURN)
        scores.update({score_id: result.score for score_id, result in checked.items()})
        try:
            reward = pick_reward(scores, self.served.reward)
        except Exception as error:  # RewardError, or anything a user's reward function may raise anything
            return await self._fail(f"the reward could not be computed from {scores}: {error}", tool_name=END_TURN, scores=scores)
        self.outcome = Outcome(status="scored", scores=scores)
        fields: dict[str, Any] = {"tool_name": END_TURN, "result": EPISODE_ENDED, "error": None, "status": "scored", "scores": scores}
        if checked:
            # Where a user debugging a 0 looks first: what the tests printed, cut short.
            fields["metadata"] = {"verifier_output": {score_id: result.output_tail for score_id, result in checked.items()}}
        return observation(fields, reward=reward, done=True)

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

    async def _optional_call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call one of corral's hooks; a plain MCP server that lacks it answers as if it did nothing."""
        assert self._env is not None
        try:
            return await self._env.call(method, params)
        except EnvCallError as error:
            if error.code == METHOD_NOT_FOUND:
                return None
            raise

    def _env_config(self):
        return self.served.bundle.envs[self.task.env]

    def _tool_error(self, name: str, error_type: str, message: str) -> dict[str, Any]:
        error = ToolError(error_type=error_type, message=message)  # type: ignore[arg-type]
        return observation({"tool_name": name, "result": message, "error": error.model_dump()})

    async def _fail(
        self, message: str, *, tool_name: str | None = None, error_type: str = "execution_error",
        scores: dict[str, float] | None = None,
    ) -> dict[str, Any]:
        """End the episode unscored, with the reason where the client and the logs see it."""
        await self.close()
        self.outcome = Outcome(status="error", scores=scores or {}, error=message)
        fields: dict[str, Any] = {"status": "error", "scores": scores or {}, "error_message": message}
        if tool_name is not None:
            fields.update(tool_name=tool_name, result=message, error={"error_type": error_type, "message": message})
        else:
            fields["error"] = {"error_type": error_type, "message": message}
        return observation(fields, reward=None, done=True)
