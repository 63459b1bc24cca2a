"""A harness episode's one long tool, `run_agent`: the agent program runs in the sandbox to its
end, its model calls captured by the server, and the episode is scored as `end_turn` scores it.

The server listens for the agent's calls on the sandbox's own socket (harness.listen), with a
capture proxy of this episode's (harness.capture), whose upstream is the engine the reset named
or the client's over its WebSocket (`upstream_for`); corral's runtime in the sandbox starts the relay and the agent, waits for it,
and kills what it started (corral.env.harness). What the agent left is then reported and scored
by the task's verifiers; the capture rides on the ended observation's metadata.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.errors import CaptureNotTrainable, SandboxError
from corral.protocol.catalog import RUN_AGENT, RUN_AGENT_GRACE_S
from corral.protocol.frames import EPISODE_ENDED, CallToolObservation
from corral.protocol.harness.capture import HarnessCapture, training_trace
from corral.protocol.outcomes import Cause
from corral.server.bundles.format import HarnessConfig, Task
from corral.server.connection.base import EnvCallError, EnvConnection, EnvDied
from corral.server.episodes.env_answers import field_of, refused
from corral.server.harness import listen
from corral.server.harness.agents import COMMON_ENVIRONMENT, KNOWN_AGENTS, fill
from corral.server.harness.capture import CaptureProxy, HttpUpstream, Upstream, create_capture_app
from corral.server.harness.socket_upstream import session_relay

log = logging.getLogger("corral.server")
RELAY_PORT = 8377  # on the sandbox's own loopback: the relay to the server's socket
DEFAULT_TEMPERATURE = 1.0


@dataclass(frozen=True)
class EngineOptions:
    """Where a harness episode's model calls go, from its reset (`llm_url`, `model`, `temperature`)."""

    llm_url: str | None = None
    model: str | None = None
    temperature: float = DEFAULT_TEMPERATURE


@dataclass(frozen=True)
class Harness:
    """An episode's harness: its env's [harness] and the engine its reset named."""

    config: HarnessConfig
    engine: EngineOptions = field(default_factory=EngineOptions)


class Played(Protocol):
    """What `play` needs of the episode (episode.ServedEpisode): its env, its clock and its endings."""

    episode_id: str
    task: Task
    _env: EnvConnection | None

    def _time_left(self) -> float: ...

    async def _end_early(
        self, observed: CallToolObservation, reason: str, *, cause: Cause, error_type: str = ...
    ) -> Any: ...

    async def _score(self, ended: CallToolObservation, report: dict[str, Any] | None) -> CallToolObservation: ...


class NoEngine(Exception):
    """run_agent was called on an episode whose reset named no engine."""


def upstream_for(engine: EngineOptions) -> Upstream:
    """The upstream that answers the episode's model calls: the client's own engine over its
    WebSocket, where its reset asked for the relay (`llm: "relay"`); else the engine at
    `llm_url`, which the server calls itself."""
    relayed = session_relay()
    if relayed is not None:
        return relayed
    if not engine.llm_url:
        raise NoEngine(
            "this harness episode has no engine to call: reset with llm_url (the trainer's vLLM, e.g. "
            '{"llm_url": "http://gpu-box:8000", "model": "Qwen/Qwen3-0.6B"}), or from corral\'s client '
            'ask for the relay (llm: "relay": Bundle(url, llm_url=...) answers the calls from its engine)'
        )
    if not engine.model:  # else the agent's own name is sent: another model or adapter of the engine's
        raise NoEngine(
            "this harness episode names no model: reset with model (the trained model's name as the engine at "
            f"{engine.llm_url} serves it), so that every call samples from the policy being trained"
        )
    return HttpUpstream(engine.llm_url, model=engine.model)


@dataclass
class AgentRun:
    """How the agent's run ended, and what its model calls were."""

    capture: HarnessCapture
    exit_code: int | None
    timed_out: bool
    output: str

    @property
    def flags(self) -> list[str]:
        """What the trainer should know of the run: it crashed, or ran out of time."""
        return [*(["timed_out"] if self.timed_out else []), *(["crashed"] if self.exit_code not in (0, None) else [])]

    def metadata(self) -> dict[str, Any]:
        """The ended observation's `capture`: level, graph summary, OpenEnv training trace."""
        summary = self.capture.summary().model_dump()
        try:
            trace: dict[str, Any] | None = training_trace(self.capture)
        except CaptureNotTrainable:
            trace = None  # the problems say why; an eval episode
        return {
            "level": self.capture.level,
            "summary": summary,
            "graph": {key: getattr(self.capture.graph(), key) for key in ("roots", "paths", "retries", "side_calls")},
            "problems": list(self.capture.problems),
            "training_trace": trace,
            "agent": {"exit_code": self.exit_code, "flags": self.flags, "output": self.output},
        }


async def run_agent(
    harness: Harness, env: EnvConnection, *, episode_id: str, prompt: str, time_left: float
) -> AgentRun:
    """Run the harness's agent in `env`'s sandbox to its end (at most its timeout, or `time_left`).
    Raises NoEngine, SandboxError (no channel here), TimeoutError (the runtime did not answer),
    and what the env's hook raises (EnvDied, EnvCallError)."""
    upstream = upstream_for(harness.engine)
    channel = env.sandbox.model_socket()
    if channel is None:
        raise SandboxError(
            f"the {type(env.sandbox).__name__} gives the agent no way to the model (its env has no [harness], "
            "or the provider cannot carry model calls); serve harness envs with --sandbox local or docker"
        )
    host_path, inside_path = channel
    config, proxy = harness.config, CaptureProxy()
    route = episode_id if re.fullmatch(r"[\w.-]+", episode_id) else uuid.uuid4().hex
    opened = proxy.open_episode(
        upstream,
        episode_id=route,
        temperature=harness.engine.temperature,
        max_calls=config.step_limit,
        max_tokens=config.max_tokens,
    )
    values = {
        "base_url": f"http://127.0.0.1:{RELAY_PORT}/episodes/{route}/v1",
        "api_key": opened.key,
        "model": harness.engine.model or "model",
        "prompt": prompt,
        "step_limit": str(config.step_limit),
    }
    templates = {**COMMON_ENVIRONMENT, **KNOWN_AGENTS[config.agent].environment, **config.environment}
    timeout_s = max(1.0, min(config.timeout_s, time_left))
    params = {
        "command": fill(config.agent_command(), values),
        "environment": dict(zip(templates, fill(list(templates.values()), values), strict=True)),
        "socket": inside_path,
        "port": RELAY_PORT,
        "timeout_s": timeout_s,
    }
    try:
        async with listen.serving(create_capture_app(proxy), host_path), asyncio.timeout(timeout_s + RUN_AGENT_GRACE_S):
            ended = await env.hook("corral/run_agent", params)
        if ended is None:  # a plain MCP server, not corral's runtime: nothing in the sandbox can start it
            reason = "the env's process is not corral's runtime (python3 -m corral.env), which starts a harness agent"
            raise EnvCallError("corral/run_agent", {"message": reason})
    finally:
        capture = proxy.close_episode(route)
    run = AgentRun(capture, ended.get("exit_code"), bool(ended.get("timed_out")), str(ended.get("output", "")))
    log.info(
        "episode %s: the agent ended (exit %s%s) after %d model calls, capture %s",
        episode_id,
        run.exit_code,
        ", out of time" if run.timed_out else "",
        len(capture.calls),
        capture.level,
    )
    return run


async def play(episode: Played, harness: Harness) -> CallToolObservation:
    """`run_agent` in `episode`: the agent runs, then what it left is reported and scored as
    end_turn scores it; the ended observation carries the capture. A crash or a timeout of the
    agent is still scored (its flags say so); the env or sandbox failing ends it as other
    failures do (endings.py)."""
    env = episode._env
    assert env is not None
    ended = CallToolObservation(tool_name=RUN_AGENT, result=EPISODE_ENDED)
    try:
        run = await run_agent(
            harness, env, episode_id=episode.episode_id, prompt=episode.task.prompt, time_left=episode._time_left()
        )
    except NoEngine as error:
        return refused(RUN_AGENT, "invalid_args", str(error))
    except SandboxError as error:
        return await episode._end_early(ended, str(error), cause="sandbox_failed")
    except TimeoutError:
        reason = f"the sandbox did not end the agent within {RUN_AGENT_GRACE_S:g}s of its time limit"
        return await episode._end_early(ended, reason, cause="tool_timeout", error_type="timeout")
    except EnvDied as error:
        reason = f"the env died while the agent ran: {error}"
        return await episode._end_early(ended, reason, cause="env_died", error_type="transport_error")
    except EnvCallError as error:
        return await episode._end_early(ended, f"the sandbox could not run the agent: {error}", cause="env_hook_failed")
    ended.metadata["capture"] = run.metadata()
    try:
        report = field_of(await env.hook("corral/report"), "report", dict) or {}
    except EnvDied as error:
        reason = f"the env died after the agent ran: {error}"
        return await episode._end_early(ended, reason, cause="env_died", error_type="transport_error")
    except EnvCallError as error:
        return await episode._end_early(ended, f"the env's own code failed: {error}", cause="env_hook_failed")
    return await episode._score(ended, report)
