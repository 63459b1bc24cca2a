"""What a harness episode needs before its agent runs: an engine named by its reset, and a
sandbox that can give the agent its socket (a provider that cannot is refused at serve time)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from corral.protocol.catalog import END_TURN_TOOL, RUN_AGENT, RUN_AGENT_TOOL, ToolSpec
from corral.sandboxes import ProviderStatus, Sandbox, SandboxProvider, SandboxSpec
from corral.server.episodes.harness_run import EngineOptions, NoEngine, upstream_for
from corral.server.formats import load_bundle
from corral.server.harness.capture import HttpUpstream
from corral.server.serving.served import _prepare_envs, _toolsets
from tests.conftest import FIXTURES

LOOK = ToolSpec(name="look", description="Look around.", input_schema={"type": "object", "properties": {}})


class Remote(SandboxProvider):
    """A provider that carries no model calls (as Kubernetes and Modal today)."""

    kind, isolated = "remote", True

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        raise AssertionError("a refused env is never started")

    def status(self) -> ProviderStatus:
        return ProviderStatus(kind=self.kind, isolated=True, live=0)


def test_a_provider_without_model_channels_refuses_a_harness_env_naming_why():
    bundle = load_bundle(FIXTURES / "harnessbox")
    assert asyncio.run(_prepare_envs(bundle, Remote())) == []
    (problem,) = bundle.problems
    assert "[harness]" in str(problem) and "--sandbox local or --sandbox docker" in str(problem)


def test_the_engine_comes_from_the_reset_or_the_call_is_refused_naming_llm_url():
    upstream = upstream_for(EngineOptions("http://gpu-box:8000", "Qwen/Qwen3-0.6B", 0.7))
    assert upstream == HttpUpstream("http://gpu-box:8000", model="Qwen/Qwen3-0.6B")
    with pytest.raises(NoEngine, match="llm_url"):
        upstream_for(EngineOptions())
    # The agent's own model name would pick another model or adapter the engine serves.
    with pytest.raises(NoEngine, match="names no model: reset with model"):
        upstream_for(EngineOptions("http://gpu-box:8000"))


def test_a_harness_task_s_toolset_offers_run_agent_before_end_turn():
    # The toolset, not the episode alone: a client's environment class is built from it.
    bundle = load_bundle(FIXTURES / "harnessbox")
    toolsets, toolset_of = _toolsets(bundle, {"agentic": [LOOK]})
    assert [tool.name for tool in toolsets[toolset_of["three"]].tools] == ["look", RUN_AGENT, END_TURN_TOOL.name]
    assert RUN_AGENT_TOOL.name == RUN_AGENT
