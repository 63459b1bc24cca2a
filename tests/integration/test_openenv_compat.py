"""OpenEnv 0.10's own clients and validator play a corral server (openenv is installed in the
test environment for this; corral imports none of it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from openenv.validation.graders.runtime import (
    ObservationSchemaGrader,
    RewardWellFormedGrader,
    StateContractGrader,
)
from openenv.validation.report import CheckResult
from openenv.validation.runtime.collector import collect_runtime_evidence
from openenv.validation.runtime.contracts import RuntimePlan
from openenv.validation.runtime.scheduler import execute_graders
from openenv.validation.types import CheckStatus
from websockets.exceptions import ConnectionClosed

from corral.protocol.frames import StateReply
from corral.server.serving import sessions
from corral.server.serving import ws as sockets
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import BUNDLES, serving, wait_for_no_env_processes
from tests.wire import error_of, opened, receive, send, ws

IDLE_DAY = [0] * 24


@pytest.fixture(scope="module")
def gridsim() -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "gridsim", max_concurrent_envs=4)


def test_openenv_validate_passes_against_corral_serve(gridsim):
    openenv_cli = Path(sys.executable).parent / "openenv"
    result = subprocess.run(
        [str(openenv_cli), "validate", gridsim.url, "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    report = json.loads(result.stdout)
    failed = [c for c in report["criteria"] if not c["passed"]] if "criteria" in report else report
    assert result.returncode == 0, failed
    assert report["passed"] is True


@pytest.mark.parametrize(
    "actions",
    [
        [
            {"type": "list_tools"},
            {"type": "call_tool", "tool_name": "submit_schedule", "arguments": {"actions": IDLE_DAY}},
            {"type": "call_tool", "tool_name": "nosuch", "arguments": {}},
            {"type": "call_tool", "tool_name": "submit_schedule", "arguments": {"actions": [0]}},
            {"type": "call_tool", "tool_name": "end_turn", "arguments": {"response": "done"}},
        ],
    ],
    ids=["a whole episode with a refused call"],
)
def test_openenv_runtime_graders_pass(gridsim, actions):
    plan = RuntimePlan.model_validate(
        {
            "plan_schema_version": "1",
            "reset": {"episode_id": "graded-1", "seed": 7, "options": {"split": "eval"}},
            "actions": actions,
        }
    )
    evidence = collect_runtime_evidence(gridsim.url, plan, episode_timeout_s=120.0)
    assert evidence.failure_reason is None
    startup = CheckResult(check_id="runtime.startup", status=CheckStatus.PASS, evidence=["ok"], duration_s=0)
    subject = SimpleNamespace(
        manifest=SimpleNamespace(reward=SimpleNamespace(range=(0.0, 1.0))), runtime_evidence=evidence
    )
    graders = [RewardWellFormedGrader(), ObservationSchemaGrader(), StateContractGrader()]
    results = {r.check_id: r for r in execute_graders(graders, subject, prior=[startup])}
    assert {check: r.status for check, r in results.items()} == {
        "runtime.reward_well_formed": CheckStatus.PASS,
        "runtime.observation_schema": CheckStatus.PASS,
        "runtime.state_contract": CheckStatus.PASS,
    }, {check: r.evidence for check, r in results.items()}
    final = json.loads(evidence.exchanges[-2].response_json)  # the end_turn's observation (then its state)
    assert final["data"]["done"] is True and final["data"]["reward"] == pytest.approx(0.2)


def test_generic_env_client_plays_a_gridsim_day(gridsim):
    with GenericEnvClient(base_url=gridsim.url).sync() as client:
        opened = client.reset(split="eval", index=3)
        assert opened.observation["task_id"].startswith("gridsim-2025-") and opened.reward is None
        listed = client.step({"type": "list_tools"})
        assert [tool["name"] for tool in listed.observation["tools"]] == ["submit_schedule", "end_turn"]
        refused = client.step({"type": "call_tool", "tool_name": "submit_schedule", "arguments": {"actions": "idle"}})
        assert refused.observation["error"]["error_type"] == "invalid_args" and refused.done is False
        submitted = client.step(
            {"type": "call_tool", "tool_name": "submit_schedule", "arguments": {"actions": IDLE_DAY}}
        )
        assert json.loads(submitted.observation["result"])["feasible"] is True and submitted.reward == 0.0
        ended = client.step({"type": "call_tool", "tool_name": "end_turn", "arguments": {"response": "done"}})
        assert ended.done is True and ended.reward == pytest.approx(0.2)
        assert client.state()["step_count"] == 4


def test_mcp_tool_client_plays_in_its_default_production_mode(gridsim):
    async def play() -> None:
        client = MCPToolClient(base_url=gridsim.url, message_timeout_s=60)
        assert client.use_production_mode
        before = await client.list_tools()  # before any reset, as OpenEnv's servers answer
        assert [tool.name for tool in before] == ["submit_schedule", "end_turn"]
        opened = await client.reset(split="eval", index=0)
        fields = opened.observation.model_dump()
        assert "submit_schedule" in fields["prompt"] and fields["task_id"].startswith("gridsim-2025-")
        answer = await client.call_tool("submit_schedule", actions=IDLE_DAY)  # over POST /mcp, same episode
        assert json.loads(answer)["profit_usd"] == 0.0
        stepped = await client.step(CallToolAction(tool_name="submit_schedule", arguments={"actions": "idle"}))
        assert stepped.observation.error is not None and stepped.observation.error.error_type == "invalid_args"
        listed = await client.step(ListToolsAction())
        assert [tool.name for tool in listed.observation.tools] == ["submit_schedule", "end_turn"]
        assert await client.call_tool("end_turn", response="done") == "The episode has ended."
        assert (await client.state()).step_count == 2  # the socket's steps; tools/call over HTTP is no step frame
        await client.close()

    asyncio.run(play())
    assert httpx.get(f"{gridsim.url}/health", trust_env=False).json()["sessions"] == 0
    assert wait_for_no_env_processes() == []


def test_a_socket_naming_an_unknown_session_is_refused(gridsim):
    with ws(gridsim, "?session_id=nope") as socket:
        refused = error_of(receive(socket))
    assert refused.code == "SESSION_ERROR" and "Unknown session_id: nope" in refused.message


def test_post_mcp_answers_json_rpc_errors_where_they_belong(gridsim):
    def post(body: str) -> dict:
        reply = httpx.post(
            f"{gridsim.url}/mcp", content=body, headers={"content-type": "application/json"}, trust_env=False
        )
        assert reply.status_code == 200
        return reply.json()

    assert post("{")["error"]["code"] == -32700
    assert post("{}")["error"]["code"] == -32600
    assert post("[]")["error"]["code"] == -32600
    unknown = post('{"jsonrpc": "2.0", "id": 4, "method": "dance"}')
    assert (unknown["id"], unknown["error"]["code"]) == (4, -32601) and "result" not in unknown
    assert (
        post('{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}}')["error"]["code"] == -32602
    )
    assert (
        post('{"jsonrpc": "2.0", "id": 6, "method": "openenv/session/close", "params": {}}')["error"]["code"] == -32602
    )
    created = post('{"jsonrpc": "2.0", "id": 7, "method": "openenv/session/create"}')["result"]["session_id"]
    bad_args = post(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 8,
                "method": "tools/call",
                "params": {"session_id": created, "name": "submit_schedule", "arguments": []},
            }
        )
    )
    assert bad_args["error"]["code"] == -32602
    closed = post(
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "openenv/session/close", "params": {"session_id": created}})
    )
    assert closed["result"] == {"session_id": created, "closed": True}


def test_a_session_created_over_http_and_left_without_a_socket_is_closed_after_its_ttl(serve, monkeypatch):
    monkeypatch.setattr(sessions, "DETACHED_TTL_S", 1.0)
    monkeypatch.setattr(sessions, "REAP_EVERY_S", 0.1)
    server = serve(BUNDLES / "gridsim", max_concurrent_envs=4)

    def create() -> str:
        body = '{"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}'
        reply = httpx.post(
            f"{server.url}/mcp", content=body, headers={"content-type": "application/json"}, trust_env=False
        )
        return reply.json()["result"]["session_id"]

    left, held = create(), create()
    with ws(server, f"?session_id={held}") as holding:
        time.sleep(1.6)
        recent = create()
        time.sleep(0.4)  # `left` has waited twice the TTL and is closed; `held` has its socket
        with ws(server, f"?session_id={left}") as late:
            refused = error_of(receive(late, timeout_s=10))
        assert refused.code == "SESSION_ERROR" and f"Unknown session_id: {left}" in refused.message
        assert isinstance(send(holding, '{"type": "state"}', timeout_s=10), StateReply)
        with ws(server, f"?session_id={held}") as second:
            refused = error_of(receive(second, timeout_s=10))
        assert refused.code == "SESSION_ERROR" and "already has an attached WebSocket" in refused.message
    for waiting in (recent, held):  # within its TTL, or just left by its socket: still there
        with ws(server, f"?session_id={waiting}") as socket:
            assert isinstance(send(socket, '{"type": "state"}', timeout_s=10), StateReply)


def test_a_session_created_over_http_that_never_plays_frees_its_slot_sooner(serve, monkeypatch):
    """A slot nobody plays in is taken from every trainer: one created and never used goes after
    UNUSED_TTL_S, one that played an episode keeps DETACHED_TTL_S for its client to come back."""
    monkeypatch.setattr(sessions, "UNUSED_TTL_S", 2.0)  # long enough to attach on a busy machine
    monkeypatch.setattr(sessions, "DETACHED_TTL_S", 600.0)
    monkeypatch.setattr(sessions, "REAP_EVERY_S", 0.1)
    server = serve(BUNDLES / "gridsim", max_concurrent_envs=4)
    body = '{"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}'

    def create() -> str:
        reply = httpx.post(
            f"{server.url}/mcp", content=body, headers={"content-type": "application/json"}, trust_env=False
        )
        return reply.json()["result"]["session_id"]

    def active() -> float:
        metrics = httpx.get(f"{server.url}/metrics", trust_env=False).text
        return float(
            next(line.split()[1] for line in metrics.splitlines() if line.startswith("corral_sessions_active "))
        )

    played = create()
    with ws(server, f"?session_id={played}") as socket:
        opened(socket, split="train", index=0)
    unused = create()
    deadline = time.monotonic() + 30
    while active() > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert active() == 1
    with ws(server, f"?session_id={unused}") as late:
        refused = error_of(receive(late, timeout_s=10))
    assert refused.code == "SESSION_ERROR" and f"Unknown session_id: {unused}" in refused.message
    reply: object = None
    while not isinstance(reply, StateReply) and time.monotonic() < deadline:
        # Its client may come back within DETACHED_TTL_S, once the server has seen it leave: until
        # then an attach is refused ("already has an attached WebSocket") and the socket closed.
        with ws(server, f"?session_id={played}") as back, contextlib.suppress(ConnectionClosed):
            reply = send(back, '{"type": "state"}', timeout_s=10)
    assert isinstance(reply, StateReply), reply


def metric(server: EmbeddedServer, name: str) -> float:
    metrics = httpx.get(f"{server.url}/metrics", trust_env=False).text
    return float(next(line.split()[1] for line in metrics.splitlines() if line.startswith(f"{name} ")))


@pytest.mark.parametrize("attached", [True, False], ids=["attached by id", "a socket's own"])
def test_a_socket_that_sends_no_frame_past_the_idle_limit_loses_its_session_and_env(serve, monkeypatch, attached):
    """A client that keeps its socket open (pings answered) and plays no more held a slot and
    an env forever: the limit a session left without a socket has applies to one with a socket."""
    monkeypatch.setattr(sockets, "IDLE_TTL_S", 1.5)
    server = serve(BUNDLES / "gridsim", max_concurrent_envs=1)
    query = ""
    if attached:
        body = '{"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}'
        headers = {"content-type": "application/json"}
        created = httpx.post(f"{server.url}/mcp", content=body, headers=headers, trust_env=False).json()
        query = f"?session_id={created['result']['session_id']}"
    with ws(server, query) as idle:
        opened(idle, split="train", index=0)
        assert metric(server, "corral_sandboxes_live") == 1
        told = error_of(receive(idle, timeout_s=30))
        with pytest.raises(ConnectionClosed):
            receive(idle, timeout_s=30)

    assert told.code == "SESSION_ERROR" and "sent no frame for 2s" in told.message, told.message
    assert (metric(server, "corral_sessions_active"), metric(server, "corral_sandboxes_live")) == (0, 0)
    with ws(server) as next_client:  # its slot is free
        opened(next_client, split="train", index=0)
