"""Harness episodes in docker containers with networking off: the scripted agent (urllib: the
image has python3 alone) reaches the stand-in engine only through the container's model
socket, the step limit holds, and the episode ends scored with a trace OpenEnv accepts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import serving
from tests.harness_bundle import TEMPERATURE, Harness, copied_bundle
from tests.harness_engine import MODEL, StandInEngine
from tests.harness_engine import serving as serving_app

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def harness(docker_engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    engine = StandInEngine()
    with serving_app(engine.app()) as engine_url:
        bundle = copied_bundle(tmp_path_factory.mktemp("harness"), int(engine_url.rsplit(":", 1)[1]))
        for server in serving(bundle, sandbox="docker", max_concurrent_envs=2):
            yield Harness(server, engine, engine_url)


def test_an_agent_in_a_container_runs_three_turns_and_is_scored_with_its_trace(harness: Harness):
    from openenv.core.harness.training import TrainingTrace

    before = len(harness.engine.sampled)
    ended = harness.run("three")
    capture = ended.metadata["capture"]
    assert "client: urllib" in capture["agent"]["output"], capture["agent"]
    assert ended.status == "scored" and ended.reward == 1.0
    assert capture["level"] == "tokens" and capture["summary"]["calls"] == 3 and capture["summary"]["paths"] == 1
    trace = TrainingTrace.model_validate(capture["training_trace"])
    sampled = harness.engine.sampled[before:]
    assert [turn.completion_token_ids for turn in trace.turns] == [call.completion_token_ids for call in sampled]
    assert [turn.prompt_token_ids for turn in trace.turns] == [call.prompt_token_ids for call in sampled]
    assert all(call.body["model"] == MODEL and call.body["temperature"] == TEMPERATURE for call in sampled)


def test_in_a_container_the_step_limit_holds_and_nothing_else_leads_out(harness: Harness):
    overrun = harness.run("overrun").metadata["capture"]
    assert overrun["summary"]["calls"] == 3 and overrun["summary"]["budget_stops"] == 2
    escape = harness.run("escape")
    output = escape.metadata["capture"]["agent"]["output"]
    port = harness.engine_url.rsplit(":", 1)[1]
    assert f"blocked 127.0.0.1:{port}" in output and "blocked 1.1.1.1:80" in output, output
    assert "reached" not in output and escape.reward == 1.0
