"""Relay mode on loopback: corral's own socket serving (`serve_socket`) with a capture proxy on the
same app, corral's client made with `llm_url` answering from the stand-in engine. The session's
episode is a stand-in whose one tool plays an agent (a thread calling the proxy, as an agent in
the sandbox does) with the upstream a harness episode takes: `session_relay()`, else the engine
directly (as with `llm_url` on the server)."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import pytest
from fastapi import WebSocket
from starlette.routing import WebSocketRoute
from websockets.sync.client import connect

from corral.client.factory import EnvironmentSpec, close_environments, environment_class
from corral.client.session import Session
from corral.protocol.catalog import Toolset
from corral.protocol.frames import (
    CallTool,
    CallToolObservation,
    Limits,
    ObservationReply,
    ResetData,
    ResetObservation,
    ResetRequest,
    StateRequest,
    StepAction,
    StepRequest,
)
from corral.protocol.harness.capture import HarnessCapture
from corral.protocol.harness.relay_frames import ModelResponse, ModelResponseData
from corral.server.harness.capture import CaptureProxy, HttpUpstream, Upstream, create_capture_app
from corral.server.harness.socket_upstream import session_relay
from corral.server.serving.sessions import ServedSession, SessionRegistry
from corral.server.serving.ws import serve_socket
from tests.harness_engine import MODEL, StandInEngine, assert_paths_are_what_was_sampled, serving

ASK = {"messages": [{"role": "system", "content": "you fix shell scripts"}, {"role": "user", "content": "fix run.sh"}]}
RUN_AGENT = StepRequest(data=CallTool(tool_name="run_agent"))


@dataclass
class Agents:
    """What the stand-in episodes saw: each run's upstream, the agent's answer, the capture."""

    engine: StandInEngine
    engine_url: str
    proxy: CaptureProxy
    proxy_url: str
    upstreams: list[Upstream] = field(default_factory=list)
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    captures: list[HarnessCapture] = field(default_factory=list)
    agent_done: threading.Event = field(default_factory=threading.Event)

    def agent(self, episode_id: str, key: str) -> None:
        """One model call, as an agent in the sandbox makes it through its episode's route."""
        url = f"{self.proxy_url}/episodes/{episode_id}/v1/chat/completions"
        answer = httpx.post(url, json={**ASK, "model": "agent-model"}, headers={"Authorization": f"Bearer {key}"})
        self.answers.append((answer.status_code, answer.json()))
        self.agent_done.set()

    async def run_agent(self, session: ServedSession) -> CallToolObservation:
        """The harness tool: the session's relay when its client asked for it, else the engine."""
        upstream = session_relay() or HttpUpstream(self.engine_url, model=MODEL)
        self.upstreams.append(upstream)
        episode_id = f"{session.session_id}-{len(self.upstreams)}"
        episode = self.proxy.open_episode(upstream, episode_id=episode_id, temperature=1.0)
        try:
            await asyncio.to_thread(self.agent, episode_id, episode.key)
        finally:  # a call cut short (its client gone) closes its capture at once, as the agent is killed
            self.captures.append(self.proxy.close_episode(episode_id))
        return CallToolObservation(tool_name="run_agent", result=json.dumps(self.answers[-1]))


@pytest.fixture
def agents(monkeypatch: pytest.MonkeyPatch) -> Iterator[Agents]:
    engine = StandInEngine()
    proxy = CaptureProxy()
    app = create_capture_app(proxy)  # the proxy and the sessions on one app: one loop, as in a server
    registry = SessionRegistry(cast(Any, None), limit=8)

    async def ws(websocket: WebSocket) -> None:
        await serve_socket(websocket, registry)

    app.router.routes.append(WebSocketRoute("/ws", ws))
    with serving(engine.app()) as engine_url, serving(app) as url:
        played = Agents(engine, engine_url, proxy, url)

        async def reset(session: ServedSession, data: ResetData) -> ResetObservation:
            return ResetObservation(task_id="fix-run-sh", episode_id=data.episode_id or "e1")

        async def step(session: ServedSession, action: StepAction) -> CallToolObservation:
            return await played.run_agent(session)

        monkeypatch.setattr(ServedSession, "reset", reset)
        monkeypatch.setattr(ServedSession, "step", step)
        yield played


def test_a_relayed_model_call_is_answered_by_the_clients_engine_and_captured(agents: Agents):
    engine = agents.engine
    session = Session(agents.proxy_url, llm_url=agents.engine_url, llm_model=MODEL)
    try:
        session.request(ResetRequest(), 30)
        reply = session.request(RUN_AGENT, 30)
    finally:
        session.close()

    assert isinstance(reply, ObservationReply)
    status, answer = agents.answers[0]
    assert status == 200
    assert answer["choices"][0]["message"]["content"] == "answer to 2 messages"
    assert [body["model"] for body in engine.bodies] == [MODEL]  # the client's name for its engine
    assert not isinstance(agents.upstreams[0], HttpUpstream)  # the relay carried it, not the server
    capture = agents.captures[0]
    assert capture.level == "tokens" and len(capture.calls) == 1 and capture.failures == []
    assert_paths_are_what_was_sampled(capture, engine.sampled)


def test_a_client_gone_mid_call_fails_the_call_with_its_cause(agents: Agents):
    with connect(agents.proxy_url.replace("http", "ws") + "/ws") as socket:
        socket.send(ResetRequest(data=ResetData(llm="relay")).model_dump_json())
        socket.recv(10)
        socket.send(RUN_AGENT.model_dump_json())
        request = json.loads(socket.recv(10))
        assert request["type"] == "model_request"  # ... and the client leaves without answering it
    assert agents.agent_done.wait(10)

    status, answer = agents.answers[0]
    assert status == 502
    assert "socket closed" in answer["error"]["message"]
    assert agents.captures[0].calls == []
    assert agents.captures[0].failures == [f"502: {answer['error']['message']}"]


def test_a_client_that_never_asked_gets_no_model_call(agents: Agents):
    with connect(agents.proxy_url.replace("http", "ws") + "/ws") as socket:
        socket.send(ResetRequest(data=ResetData(llm="relay")).model_dump_json())
        socket.recv(10)
        socket.send(ResetRequest().model_dump_json())  # the next episode does not ask
        socket.recv(10)
        socket.send(RUN_AGENT.model_dump_json())
        reply = json.loads(socket.recv(10))

    assert reply["type"] == "observation"  # the tool's answer, and no model_request before it
    assert isinstance(agents.upstreams[0], HttpUpstream)
    assert agents.answers[0][0] == 200


def test_a_plain_sessions_reset_asks_for_no_relay(agents: Agents):
    session = Session(agents.proxy_url)  # made without llm_url
    try:
        session.request(ResetRequest(), 30)
        session.request(RUN_AGENT, 30)
    finally:
        session.close()
    assert isinstance(agents.upstreams[0], HttpUpstream)


def test_a_stray_model_response_between_calls_is_ignored(agents: Agents):
    """An answer that comes after its call ended (or never had one) is not a frame the session
    answers: the next reply is the next request's."""
    stray = ModelResponse(data=ModelResponseData(id="m9", status=200, body={}))
    with connect(agents.proxy_url.replace("http", "ws") + "/ws") as socket:
        socket.send(stray.model_dump_json())
        socket.send(StateRequest().model_dump_json())
        assert json.loads(socket.recv(10))["type"] == "state"


def test_an_environment_made_with_llm_url_plays_in_relay_mode(agents: Agents):
    """`Bundle(url, llm_url=...)`'s environment classes (pickled into a trainer's workers) open
    their sessions with the relay."""
    spec = EnvironmentSpec(
        toolset=Toolset(name="harness", env="harness", tools=[]),
        url=agents.proxy_url,
        server_limits=Limits(tool_timeout_s=60, reset_timeout_s=60),
        keepalive_s=20.0,
        capacity_wait_s=0.0,
        llm_url=agents.engine_url + "/v1",
        llm_model=MODEL,
    )
    environment = pickle.loads(pickle.dumps(environment_class(spec)))()
    try:
        environment.reset()
        environment._session.request(RUN_AGENT, 30)  # the harness tool, as the trainer's rollout calls it
    finally:
        close_environments(agents.proxy_url)
    assert agents.answers[0][0] == 200 and not isinstance(agents.upstreams[0], HttpUpstream)
