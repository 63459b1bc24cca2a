"""Fakes an episode is played with in-process (tests/unit/test_episode_endings.py): a runtime
(`episode_runtime.EpisodeRuntime`) whose env connections (`env_connection.EnvConnection`) call
corral's own env runtime (`corral.env.runtime.Server`) on a parrot env in this process, and whose
verifier runs here too; `play` plays calls on it and returns what a client sees."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.env import Env, jsonrpc, tool
from corral.env.runtime import Server
from corral.errors import SandboxError
from corral.protocol.catalog import END_TURN_TOOL, ToolSpec
from corral.protocol.frames import Limits
from corral.protocol.records import EpisodeRecord
from corral.protocol.rewards import RewardRule
from corral.sandboxes import CommandResult, ProviderStatus, Sandbox
from corral.server.bundles.format import Task
from corral.server.bundles.verifiers import CommandScore, Verify, score_episode
from corral.server.connection.base import EnvCallError, EnvConnection, EnvDied
from corral.server.episodes.episode import ServedEpisode
from corral.server.metrics import Metrics

LIMITS = Limits(tool_timeout_s=0.2, reset_timeout_s=5.0)
FAILURE_SCORE = -1.0  # not 0: an episode the agent made fail is told apart from one that scored 0
TASK = Task(
    id="polly",
    env="parrot",
    args={"word": "polly"},
    prompt="Say polly.",
    verifiers={"said": "said"},
    failure_score=FAILURE_SCORE,
)


class Died(BaseException):
    """Raised by a tool to make its in-process env die, as a process that exits would."""


class Hangs(BaseException):
    """Raised by a tool to make its in-process env never answer, as a stuck process would."""


class Parrot(Env):
    """Repeats what it is told; its report is what it heard, and the word it waits for."""

    def reset(self, args: dict) -> None:
        self.word = args["word"]
        self.heard: list[str] = []

    @tool
    def say(self, text: str) -> str:
        """Say something; the parrot says it back.

        Args:
            text: what to say.
        """
        self.heard.append(text)
        return text

    @tool
    def crash(self) -> str:
        """Make the env die."""
        raise Died

    @tool
    def hang(self) -> str:
        """Never answer."""
        raise Hangs

    @tool
    def refuse(self) -> str:
        """Make the env answer the call with an error."""
        raise Refuses

    def end_turn(self, response: str) -> str | None:
        if response == "boom":
            raise ValueError("the parrot chokes on boom")
        return None

    def report(self) -> dict:
        return {"heard": self.heard, "word": self.word}


def said(task: dict, report: dict) -> float:
    """1 when the parrot heard its word; 0.5 when it heard anything else; raises on "boom"."""
    if "boom" in report["heard"]:
        raise ValueError("the report holds a boom")
    return 1.0 if report["word"] in report["heard"] else 0.5


class Refuses(BaseException):
    """Raised by a tool or hook to make its in-process env answer the call with an error."""


class NoCommands(Sandbox):
    """The parrot's sandbox: the episode closes it; it runs no command verifiers."""

    def __init__(self) -> None:
        self.closed = False

    async def send_line(self, line: bytes) -> None:
        raise AssertionError("the episode speaks to its env through its connection, never the sandbox's stream")

    async def read_line(self) -> bytes:
        raise AssertionError("the episode speaks to its env through its connection, never the sandbox's stream")

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return "parrot: crashing on purpose"[-max_chars:]

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Any],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        raise SandboxError("the in-process sandbox runs no command verifiers")

    async def close(self) -> None:
        self.closed = True


class ParrotConnection:
    """An `EnvConnection` to a parrot in this process: corral's env runtime (`Server`) answers
    each call at once, as the env's process would, with no JSON lines in between. `calls`: the
    methods the episode called, in order."""

    def __init__(self, env: Env, breaks_on_silence: bool = False):
        self.env = env
        self.breaks_on_silence = breaks_on_silence  # an empty reply (the untouched replay's) breaks corral's side
        self.sandbox = NoCommands()
        self.idle = True
        self.calls: list[str] = []
        self._server = Server(env)

    @property
    def closed(self) -> bool:
        return self.sandbox.closed

    async def initialize(self) -> None:
        self.calls.append("initialize")

    async def hook(self, method: str, params: dict[str, Any] | None = None) -> Any:
        if self.breaks_on_silence and params == {"response": ""}:
            raise RuntimeError("the parrot's connection broke")
        return await self._answer(method, params or {})

    async def list_tools(self) -> list[Any]:
        return list(self._server.tools.values())

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self._answer("tools/call", {"name": name, "arguments": arguments})

    async def close(self) -> None:
        self.calls.append("close")
        await self.sandbox.close()

    async def _answer(self, method: str, params: dict[str, Any]) -> Any:
        if self.closed:
            raise EnvDied("the env process exited")
        self.calls.append(method)
        self.idle = False
        try:
            result = self._server.methods[method](params)
        except Died:
            self.sandbox.closed = True
            raise EnvDied(
                f"the env process exited with status 3; the env's stderr ends with:\n{self.sandbox.stderr_tail()}"
            ) from None
        except Hangs:
            await asyncio.Event().wait()
        except Refuses:
            raise EnvCallError(method, {"code": -32000, "message": "the parrot refuses"}) from None
        except jsonrpc.RpcError as error:
            raise EnvCallError(method, {"code": error.code, "message": error.message}) from None
        self.idle = True
        return result


@dataclass
class FakeRuntime:
    """An `EpisodeRuntime` that plays the parrot in-process and scores with `said` in-process."""

    max_argument_bytes: int = 64 * 1024
    max_output_chars: int = 1000
    verify: Verify = said
    start_fails: str | None = None  # why every sandbox fails to start
    platform_fault: str | None = None  # why the provider says it fails now
    breaks_on_silence: bool = False  # its envs' connections break on an empty reply (ParrotConnection)
    name: str = "parrots"
    reward: RewardRule = None
    starts: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(4))
    metrics: Metrics = field(default_factory=lambda: Metrics(lambda: ProviderStatus("in-process", False, 0)))
    connections: list[ParrotConnection] = field(default_factory=list)
    ended: list[EpisodeRecord] = field(default_factory=list)

    def offered_tools(self, task: Task) -> list[ToolSpec]:
        return [*(ToolSpec.model_validate(schema) for schema in Parrot.tool_schemas()), END_TURN_TOOL]

    async def connect(self, task: Task, labels: Mapping[str, str]) -> EnvConnection:
        if self.start_fails is not None:
            raise SandboxError(self.start_fails)
        self.connections.append(ParrotConnection(Parrot(), self.breaks_on_silence))
        return self.connections[-1]

    async def check_platform(self) -> None:
        if self.platform_fault is not None:
            raise SandboxError(self.platform_fault)

    def sandbox_kind(self) -> str:
        return "in-process"

    def python_verifiers(self, task: Task) -> dict[str, str]:
        return dict(task.verifiers)

    async def run_command_verifiers(self, sandbox: Sandbox, task: Task) -> dict[str, CommandScore]:
        return {}

    async def score(
        self, task: Task, report: dict[str, Any], verifiers: Mapping[str, str], *, timeout_s: float
    ) -> dict[str, float]:
        return score_episode(task.model_dump(), report, verifiers, {"said": self.verify})

    def episode_ended(self, record: EpisodeRecord) -> None:
        self.ended.append(record)


def play(runtime: FakeRuntime, *calls: tuple[str, dict[str, Any]], task: Task = TASK) -> list[Any]:
    """Reset an episode of `task` and make `calls`; every observation, the reset's first. The
    episode is closed at the end, as its session would close it."""

    async def episode() -> list[Any]:
        played = ServedEpisode(runtime, task, limits=LIMITS, session_id="s1")
        seen: list[Any] = [await played.start()]
        try:
            for name, arguments in calls:
                seen.append(await played.call_tool(name, arguments))
        finally:
            await played.close()
        return seen

    return asyncio.run(episode())


def replays(runtime: FakeRuntime, platform: str) -> float | None:
    """Untouched replays counted, by what they showed of the platform (as /metrics shows them)."""
    return runtime.metrics.registry.get_sample_value("corral_untouched_replays_total", {"platform": platform})
