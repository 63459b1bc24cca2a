"""Whole episodes over a real uvicorn server on loopback, by raw frames and through Bundle."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from websockets.sync.client import connect

from corral.client import Bundle
from tests.conftest import BUNDLES

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def ws(server):
    return connect(server.url.replace("http://", "ws://") + "/ws", proxy=None)


def exchange(socket, frame: dict) -> dict:
    socket.send(json.dumps(frame))
    return json.loads(socket.recv(timeout=60))


def call(name: str, **arguments) -> dict:
    return {"type": "step", "data": {"type": "call_tool", "tool_name": name, "arguments": arguments}}


def gridsim_grader():
    spec = importlib.util.spec_from_file_location("gridsim_grade", BUNDLES / "gridsim/verifiers/grade.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_gridsim_episode_by_frames(gridsim_server):
    with ws(gridsim_server) as socket:
        opened = exchange(socket, {"type": "reset", "data": {"split": "eval", "index": 3}})
        assert opened["type"] == "observation" and opened["data"]["done"] is False
        first = opened["data"]["observation"]
        assert first["task_id"].startswith("gridsim-2025-")
        assert "submit_schedule" in first["prompt"] and first["system_prompt"]
        assert [tool["name"] for tool in first["tools"]] == ["submit_schedule", "end_turn"]

        listed = exchange(socket, {"type": "step", "data": {"type": "list_tools"}})
        assert [t["name"] for t in listed["data"]["observation"]["tools"]] == ["submit_schedule", "end_turn"]

        short = exchange(socket, call("submit_schedule", actions=[0] * 23))
        assert short["data"]["observation"]["result"] == '{"submitted":false,"error":"expected exactly 24 integers, got 23"}'
        assert short["data"]["done"] is False

        idle = json.loads(exchange(socket, call("submit_schedule", actions=[0] * 24))["data"]["observation"]["result"])
        assert idle["submitted"] and idle["feasible"] and idle["profit_usd"] == 0.0

        state = exchange(socket, {"type": "state"})
        assert state["data"]["step_count"] == 2 and state["data"]["task_id"] == first["task_id"]

        ended = exchange(socket, call("end_turn", response="done"))
        assert ended["data"]["done"] is True
        assert ended["data"]["reward"] == pytest.approx(0.2)
        assert ended["data"]["observation"]["scores"] == {"grade": pytest.approx(0.2)}

        after = exchange(socket, call("submit_schedule", actions=[0] * 24))
        assert after["type"] == "error" and "reset" in after["data"]["message"]


def test_mcp_frames_list_and_call_the_episode_tools(gridsim_server):
    with ws(gridsim_server) as socket:
        exchange(socket, {"type": "reset", "data": {"split": "train", "index": 0}})
        listed = exchange(socket, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})
        assert listed["data"]["id"] == 1
        assert listed["data"]["result"]["tools"][0]["inputSchema"]["properties"]["actions"]["type"] == "array"
        called = exchange(socket, {"type": "mcp", "data": {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "submit_schedule", "arguments": {"actions": [0] * 2}}}})
        assert called["data"]["result"]["content"][0]["text"].startswith('{"submitted":false')


def test_idle_scores_point_two_and_the_optimum_scores_one(gridsim_server):
    grader = gridsim_grader()
    with Bundle(gridsim_server.url, split="eval") as env:
        environment = env.factory()
        rows = [env.dataset[i] for i in (0, 7)]
        for row in rows:
            environment.reset(**row)
            assert environment.submit_schedule(actions=[0] * 23) == (
                '{"submitted":false,"error":"expected exactly 24 integers, got 23"}'
            )
            environment.submit_schedule(actions=[0] * 24)
            assert environment.get_reward() == pytest.approx(0.2)

            environment.reset(**row)
            task = next(json.loads(line) for line in (BUNDLES / "gridsim/tasks.jsonl").open()
                        if json.loads(line)["id"] == row["task_id"])
            _, best = grader.optimal_schedule(task["args"])
            assert json.loads(environment.submit_schedule(actions=best))["feasible"] is True
            assert environment.end_turn(response="submitted") == "The episode has ended."
            assert environment.get_reward() == pytest.approx(1.0)


def test_a_turn_left_open_is_ended_before_scoring(gridsim_server):
    with Bundle(gridsim_server.url, split="train") as env:
        environment = env.factory()
        environment.reset(**env.dataset[5])
        assert environment.get_reward() == 0.0  # nothing submitted: nothing useful


def test_a_tictactoe_game_over_several_turns(serve):
    server = serve(BUNDLES / "tictactoe")
    with Bundle(server.url, split="eval") as env:
        assert [n for n in vars(env.factory) if not n.startswith("_")] == ["place", "end_turn"]
        environment = env.factory()
        environment.reset(**env.dataset[0])
        board, turns, reply = ["...", "...", "..."], 0, ""
        while reply != "The episode has ended.":
            row, col = next((r, c) for r in range(3) for c in range(3) if board[r][c] == ".")
            placed = json.loads(environment.place(row=row + 1, col=col + 1))
            assert placed["legal"] is True
            reply = environment.end_turn(response="my move")
            turns += 1
            if reply != "The episode has ended.":
                assert reply.startswith("O played row")
                board = _board_from_prompt(reply)
        assert turns >= 3
        assert environment.get_reward() in (0.0, 0.5, 1.0)


def _board_from_prompt(prompt: str) -> list[str]:
    rows = [match.group(1).replace(" ", "") for line in prompt.splitlines()
            if (match := re.fullmatch(r"[123] ([XO.] [XO.] [XO.])", line.strip()))]
    assert len(rows) == 3, prompt
    return rows
