"""Harness episodes in the local sandbox: `run_agent` runs a scripted OpenAI-SDK agent
(tests/fixtures/harnessbox) in the sandbox, its model calls reach the stand-in engine only
through the sandbox's socket and corral's capture, and the episode ends scored with the capture."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until_none
from tests.harness_bundle import TEMPERATURE, Harness
from tests.harness_engine import MODEL
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
LINGERER = b"1234.5"  # the argument of the process the `linger` agent leaves behind


def test_an_sdk_agent_runs_three_turns_and_the_episode_ends_scored_with_its_trace(harness: Harness):
    from openenv.core.harness.training import TrainingTrace

    before = len(harness.engine.sampled)
    ended = harness.run("three")
    assert ended.done and ended.status == "scored" and ended.reward == 1.0
    capture = ended.metadata["capture"]
    assert capture["level"] == "tokens" and capture["problems"] == []
    assert capture["summary"] == {
        "level": "tokens",
        "calls": 3,
        "roots": 1,
        "paths": 1,
        "retries": 0,
        "side_calls": 0,
        "budget_stops": 0,
    }
    assert capture["agent"]["exit_code"] == 0 and capture["agent"]["flags"] == []
    assert "client: openai" in capture["agent"]["output"]
    trace = TrainingTrace.model_validate(capture["training_trace"])
    sampled = harness.engine.sampled[before:]
    assert [turn.prompt_token_ids for turn in trace.turns] == [call.prompt_token_ids for call in sampled]
    assert [turn.completion_token_ids for turn in trace.turns] == [call.completion_token_ids for call in sampled]
    assert [turn.per_token_logps for turn in trace.turns] == [call.logprobs for call in sampled]
    for body in (call.body for call in sampled):  # the reset's engine and policy, whatever the agent asked
        assert body["model"] == MODEL and body["temperature"] == TEMPERATURE and body["return_token_ids"] is True


def test_the_proxy_holds_the_step_limit(harness: Harness):
    before = len(harness.engine.sampled)
    ended = harness.run("overrun")
    capture = ended.metadata["capture"]
    assert capture["summary"]["calls"] == 3 and capture["summary"]["budget_stops"] == 2
    assert len(harness.engine.sampled) - before == 3  # the two past the limit never reached the engine
    assert capture["agent"]["output"].count("answer: Step budget exhausted; stopping.") == 2
    assert ended.status == "scored" and ended.reward == 0.0  # its last answer was the stop message


def test_nothing_but_the_socket_leads_out_of_the_sandbox(harness: Harness):
    ended = harness.run("escape")
    output = ended.metadata["capture"]["agent"]["output"]
    port = harness.engine_url.rsplit(":", 1)[1]
    assert f"blocked 127.0.0.1:{port}" in output and "blocked 1.1.1.1:80" in output, output
    assert "reached" not in output
    assert ended.reward == 1.0 and ended.metadata["capture"]["summary"]["calls"] == 1  # its call through corral went


def test_a_crashed_agent_is_scored_and_flagged(harness: Harness):
    ended = harness.run("crash")
    agent = ended.metadata["capture"]["agent"]
    assert agent["exit_code"] == 3 and agent["flags"] == ["crashed"]
    assert ended.status == "scored" and ended.reward == 1.0
    assert ended.metadata["capture"]["training_trace"]["turns"]


def lingering() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and LINGERER in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_an_agent_past_its_time_is_killed_with_what_it_left_and_still_scored(harness: Harness):
    began = time.monotonic()
    ended = harness.run("linger")
    assert time.monotonic() - began < 30  # its time limit is 8 s; it would sleep 600
    agent = ended.metadata["capture"]["agent"]
    assert agent["exit_code"] is None and agent["flags"] == ["timed_out"]
    assert ended.status == "scored" and ended.reward == 1.0
    assert wait_until_none(lingering, 10) == []  # the process it set apart went with the sandbox


def test_run_agent_over_post_mcp_and_without_an_engine(harness: Harness):
    url = harness.server.url
    post = lambda body: httpx.post(f"{url}/mcp", json=body, trust_env=False, timeout=60).json()
    session = post({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"})["result"]["session_id"]
    call = {"name": "run_agent", "arguments": {}, "session_id": session}
    with ws(harness.server, f"?session_id={session}") as socket:
        opened(socket, task_id="three")  # no llm_url: refused, and the episode goes on
        refusal = called(socket, "run_agent")
        assert not refusal.done and refusal.error is not None and "llm_url" in refusal.error.message
        opened(socket, **harness.reset("three"))
    result = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})["result"]["structuredContent"]
    assert result["done"] is True and result["reward"] == 1.0, result
    assert result["metadata"]["capture"]["summary"]["calls"] == 3
    post({"jsonrpc": "2.0", "id": 3, "method": "openenv/session/close", "params": {"session_id": session}})
