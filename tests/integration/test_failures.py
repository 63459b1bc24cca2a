"""Bad input and failures end only what they must: the session and the server go on."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from corral.client import Bundle, CapacityError
from corral.errors import ToolsetMismatch
from corral.protocol.frames import CallToolObservation
from tests.conftest import FIXTURES, env_processes, wait_for_no_env_processes
from tests.proxies import loopback_proxy
from tests.wire import call, called, error_of, observed, opened, receive, send, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
TOYBOX = FIXTURES / "toybox"


def test_the_session_past_the_limit_is_refused_with_the_fix(serve):
    server = serve(TOYBOX, max_concurrent_envs=2)
    with Bundle(server.url, split="toy") as env:
        first, second, third = env.factory(), env.factory(), env.factory()
        first.reset(**env.dataset[0])
        second.reset(**env.dataset[0])
        with pytest.raises(CapacityError) as refused:
            third.reset(**env.dataset[0])
        message = str(refused.value)
        assert f"the server at {server.url} is at its limit of 2 sessions" in message
        assert "--max-concurrent-envs" in message
        first.say(text="apple")
        assert first.get_reward() == 1.0


def test_a_missed_tool_deadline_ends_the_episode_with_its_failure_score_and_the_session_plays_on(toybox_server, caplog):
    with Bundle(toybox_server.url, split="toy", tool_timeout=0.5) as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        answer = environment.wait(seconds=30)
        assert "wait didn't answer within 0.5s" in answer
        with caplog.at_level(logging.INFO, logger="corral.client"):
            assert environment.get_reward() == 0.0  # the agent's doing: scored, never left out
        assert "rollout failed by the agent, scored 0.0: wait didn't answer within 0.5s" in caplog.text

        environment.reset(**env.dataset[0])
        assert json.loads(environment.say(text="apple")) == {"heard": "apple"}
        assert environment.get_reward() == 1.0


def test_an_env_that_dies_ends_its_episode_with_its_failure_score_and_its_stderr(toybox_server):
    with Bundle(toybox_server.url, split="toy") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        answer = environment.crash()
        assert "the env died during crash" in answer and "crashing on purpose" in answer
        assert environment.get_reward() == 0.0
        environment.reset(**env.dataset[0])
        environment.say(text="apple")
        assert environment.get_reward() == 1.0


def test_bad_tool_arguments_answer_the_model_and_the_episode_goes_on(toybox_server):
    with ws(toybox_server) as socket:
        opened(socket, split="toy", index=0)
        wrong = called(socket, "say", text=3)
        assert wrong.done is False and wrong.result is None
        assert wrong.error.error_type == "invalid_args" and "argument 'text'" in wrong.error.message
        unknown = called(socket, "shout", text="apple")
        assert unknown.error.error_type == "tool_not_found"
        called(socket, "say", text="apple")
        assert called(socket, "end_turn", response="").reward == 1.0


def test_malformed_frames_get_error_frames_and_the_session_survives(toybox_server):
    with ws(toybox_server) as socket:

        def code(frame: str) -> str:
            return error_of(send(socket, frame, timeout_s=30)).code

        assert code("not json {") == "INVALID_JSON"
        assert code('{"type": "dance"}') == "UNKNOWN_TYPE"
        assert code('["reset"]') == "VALIDATION_ERROR"
        assert code('{"type": "step", "data": {"type": "call_tool"}}') == "VALIDATION_ERROR"
        assert code('{"type": "reset", "data": {"split": "nope"}}') == "VALIDATION_ERROR"
        assert code('{"type": "reset", "data": {"split": "toy", "index": 99}}') == "VALIDATION_ERROR"
        assert code('{"type": "reset", "data": {"tool_timeout_s": -1}}') == "VALIDATION_ERROR"
        assert code('{"type": "reset", "data": {"tool_timeout_s": Infinity}}') == "VALIDATION_ERROR"
        assert (
            code('{"type": "step", "data": {"type": "call_tool", "tool_name": "say"}}') == "EXECUTION_ERROR"
        )  # no episode yet
        assert opened(socket, split="toy", index=0).done is False
        called(socket, "say", text="apple")
        assert called(socket, "end_turn", response="ok").reward == 1.0


def test_an_idle_environment_keeps_its_session_and_episode_through_keepalives(serve):
    keepalive = 0.2
    server = serve(TOYBOX, keepalive=keepalive)
    # Between the client and the server, a proxy that drops a socket idle for 1 s: only the
    # keepalive pings (every 0.2 s, from both ends) carry the session through a 2 s wait.
    with loopback_proxy(server.url, idle_s=5 * keepalive) as url, Bundle(url, split="toy", keepalive=keepalive) as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        time.sleep(10 * keepalive)  # the caller is busy (a trainer generating), the socket is not
        assert httpx.get(f"{server.url}/health", trust_env=False).json()["sessions"] == 1
        environment.say(text="apple")
        assert environment.get_reward() == 1.0


def test_a_client_that_drops_its_socket_mid_episode_has_its_env_torn_down(toybox_server):
    socket = ws(toybox_server)
    opened(socket, split="toy", index=0)
    socket.send(call("wait", seconds=60).model_dump_json())
    time.sleep(0.3)
    assert len(env_processes()) == 1
    socket.close()
    assert wait_for_no_env_processes(timeout_s=5) == []


def test_frames_sent_during_a_long_call_are_each_answered_after_it_in_order(toybox_server):
    socket = ws(toybox_server)
    opened(socket, split="toy", index=0)
    socket.send(call("wait", seconds=0.5).model_dump_json())  # long enough to have the socket read for it
    words = ["one", "two", "three"]
    for word in words:
        socket.send(call("say", text=word).model_dump_json())
    replies = [observed(receive(socket, timeout_s=10), CallToolObservation) for _ in range(4)]
    assert [reply.result for reply in replies] == ["done waiting", *(f'{{"heard":"{word}"}}' for word in words)]
    socket.send(call("say", text="four").model_dump_json())  # read by the player itself again
    assert observed(receive(socket, timeout_s=10), CallToolObservation).result == '{"heard":"four"}'
    socket.close()


def test_a_split_with_several_toolsets_gives_a_dict_factory_whose_rows_route(toybox_server):
    with Bundle(toybox_server.url, split="mixed") as env:
        assert sorted(env.factory) == ["counter", "toy:say+wait+crash"]  # the split's toolsets only
        rows = list(env.dataset)
        assert [row["environment"] for row in rows] == ["toy:say+wait+crash", "counter"]
        for row in rows:
            environment = env.factory[row["environment"]]()
            environment.reset(**{k: v for k, v in row.items() if k != "environment"})
        assert [n for n in vars(env.factory["counter"]) if not n.startswith("_")] == ["add", "end_turn"]
        counter = env.factory["counter"]()
        counter.reset(**rows[1])
        counter.add(amount=3)
        assert counter.get_reward() == 1.0


def test_a_row_played_by_the_wrong_class_stops_with_the_reason(toybox_server):
    with Bundle(toybox_server.url, split="toy") as env:
        with pytest.raises(ToolsetMismatch, match="open a Bundle on split 'all'"):
            env.dataset_for("all")  # say-pear offers only `say`, a toolset split `toy` lacks
        with pytest.raises(ToolsetMismatch, match="offers the tools"):
            env.factory().reset(task_id="say-pear")
