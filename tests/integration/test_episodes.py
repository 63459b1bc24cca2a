"""Whole episodes over a real uvicorn server on loopback, by raw frames and through Bundle."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import pytest

from corral.client import Bundle
from corral.protocol.frames import ResetObservation
from tests.conftest import BUNDLES
from tests.wire import called, listed, mcp, opened, rpc, send, state, state_of, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def gridsim_grader():
    spec = importlib.util.spec_from_file_location("gridsim_grade", BUNDLES / "gridsim/verifiers/grade.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_gridsim_episode_by_frames(gridsim_server):
    with ws(gridsim_server) as socket:
        first = opened(socket, split="eval", index=3)
        assert isinstance(first, ResetObservation) and first.done is False and first.reward is None
        assert first.task_id.startswith("gridsim-2025-")
        assert "submit_schedule" in first.prompt and first.system_prompt
        assert [tool.name for tool in first.offered_tools] == ["submit_schedule", "end_turn"]
        assert first.limits.tool_timeout_s == 60 and first.limits.reset_timeout_s == 600

        assert [tool.name for tool in listed(socket).tools] == ["submit_schedule", "end_turn"]

        short = called(socket, "submit_schedule", actions=[0] * 23)
        assert short.result == '{"submitted":false,"error":"expected exactly 24 integers, got 23"}'
        assert short.error is None and short.done is False and short.reward == 0.0

        idle = json.loads(called(socket, "submit_schedule", actions=[0] * 24).result)
        assert idle["submitted"] and idle["feasible"] and idle["profit_usd"] == 0.0

        counted = state_of(send(socket, state()))
        assert counted.step_count == 3 and counted.task_id == first.task_id  # list_tools is a step too

        ended = called(socket, "end_turn", response="done")
        assert ended.done is True and ended.status == "scored"
        assert ended.reward == pytest.approx(0.2)
        assert ended.scores == {"grade": pytest.approx(0.2)}

        after = send(socket, '{"type": "step", "data": {"type": "call_tool", "tool_name": "end_turn"}}')
        assert after.type == "error" and "reset" in after.data.message


def test_a_seed_picks_the_same_task_every_time(gridsim_server):
    with ws(gridsim_server) as socket:
        picked = {opened(socket, split="eval", seed=seed).task_id for seed in (5, 5, 205)}
        other = opened(socket, split="eval", seed=6).task_id
    assert len(picked) == 1 and other not in picked  # eval has 200 days: seed 205 is seed 5's


def test_mcp_frames_list_and_call_the_episode_tools(gridsim_server):
    with ws(gridsim_server) as socket:
        before = rpc(send(socket, mcp("tools/list", request_id=7)))
        assert [tool["name"] for tool in before.result["tools"]] == ["submit_schedule", "end_turn"]
        opened(socket, split="train", index=0)
        listed_now = rpc(send(socket, mcp("tools/list", request_id=1)))
        assert listed_now.id == 1
        assert listed_now.result["tools"][0]["inputSchema"]["properties"]["actions"]["type"] == "array"
        short = rpc(send(socket, mcp("tools/call", {"name": "submit_schedule", "arguments": {"actions": [0] * 2}}, 2)))
        assert short.result["content"][0]["text"].startswith('{"submitted":false')
        assert short.result["isError"] is False and short.result["data"] == short.result["content"][0]["text"]
        refused = rpc(send(socket, mcp("tools/call", {"name": "submit_schedule", "arguments": {"actions": "x"}}, 3)))
        assert refused.result["isError"] is True and "actions" in refused.result["data"]
        assert rpc(send(socket, '{"type": "mcp", "data": {"id": 4, "method": "tools/list"}}')).error.code == -32600
        assert rpc(send(socket, mcp("tools/dance", request_id=5))).error.code == -32601
        bad = rpc(send(socket, mcp("tools/call", {"name": 3}, 6)))
        assert (bad.id, bad.error.code) == (6, -32602)


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
            environment.submit_schedule([0] * 24)  # by position, as a person in a notebook would
            assert environment.get_reward() == pytest.approx(0.2)

            environment.reset(**row)
            task = next(
                json.loads(line)
                for line in (BUNDLES / "gridsim/tasks.jsonl").open()
                if json.loads(line)["id"] == row["task_id"]
            )
            _, best = grader.optimal_schedule(task["args"])
            assert json.loads(environment.submit_schedule(actions=best))["feasible"] is True
            assert environment.end_turn(response="submitted") == "The episode has ended."
            assert environment.get_reward() == pytest.approx(1.0)


def test_a_turn_left_open_is_ended_before_scoring(gridsim_server):
    with Bundle(gridsim_server.url, split="train") as env:
        environment = env.factory()
        environment.reset(**env.dataset[5])
        assert environment.get_reward() == 0.0  # nothing submitted: nothing useful


def test_an_end_turn_with_a_response_not_a_string_or_another_argument_is_refused_and_the_turn_goes_on(gridsim_server):
    with ws(gridsim_server) as socket:
        opened(socket, split="train", index=0)
        for arguments in ({"response": 7}, {"response": "done", "mood": "sure"}):
            refused = called(socket, "end_turn", **arguments)
            assert refused.error.error_type == "invalid_args" and refused.done is False
            assert refused.error.message == "end_turn takes one argument, response: a string"
        assert called(socket, "end_turn", response="done").done is True


# X takes the first free square each turn; the eval split's first three seeded opponents then
# beat X (a tactical O, on the bottom row), lose to it (a random O) and draw.
@pytest.mark.parametrize(("index", "outcome"), [(0, "loss"), (1, "win"), (2, "draw")])
def test_a_tictactoe_game_over_several_turns(serve, index: int, outcome: str):
    server = serve(BUNDLES / "tictactoe")
    with Bundle(server.url, split="eval") as env:
        assert [n for n in vars(env.factory) if not n.startswith("_")] == ["place", "end_turn"]
        environment = env.factory()
        environment.reset(**env.dataset[index])
        board, turns, reply = ["...", "...", "..."], 0, ""
        while reply != "The episode has ended.":
            row, col = next((r, c) for r in range(3) for c in range(3) if board[r][c] == ".")
            placed = json.loads(environment.place(row=row + 1, col=col + 1))
            assert placed["legal"] is True
            board = placed["board"]  # with X's move
            reply = environment.end_turn(response="my move")
            turns += 1
            if reply != "The episode has ended.":
                assert reply.startswith("O played row")
                board = _board_from_prompt(reply)
        assert turns >= 3
        # The outcome, from the last board X saw: an X line is a win, a full board a draw;
        # otherwise O's reply ended the game, which only an O line does.
        played = "win" if _winner(board) == "X" else "draw" if "." not in "".join(board) else "loss"
        assert played == outcome
        assert environment.get_reward() == {"win": 1.0, "draw": 0.5, "loss": 0.0}[outcome]


def test_a_game_cut_at_the_tasks_max_turns_ends_there_and_is_scored(serve, tmp_path):
    """Two turns allowed, a game that needs more: the second end_turn ends the episode (no third
    prompt), and the verifier scores the unfinished game 0."""
    bundle = shutil.copytree(BUNDLES / "tictactoe", tmp_path / "tictactoe")
    toml = bundle / "bundle.toml"
    toml.write_text(toml.read_text().replace("max_turns = 5", "max_turns = 2"))
    with ws(serve(bundle)) as socket:
        opened(socket, split="eval", index=2)  # the drawn game above: five turns, if allowed
        board = ["...", "...", "..."]
        for turn in (1, 2):
            row, col = next((r, c) for r in range(3) for c in range(3) if board[r][c] == ".")
            assert json.loads(called(socket, "place", row=row + 1, col=col + 1).result)["legal"] is True
            reply = called(socket, "end_turn", response="my move")
            assert reply.done is (turn == 2)
            if turn == 1:
                assert reply.turn == 2
                board = _board_from_prompt(reply.result)
        assert (reply.result, reply.status, reply.reward) == ("The episode has ended.", "scored", 0.0)


def _winner(board: list[str]) -> str | None:
    """The mark that fills a row, a column or a diagonal of `board`, if one does."""
    lines = [
        *board,
        *map("".join, zip(*board, strict=True)),
        board[0][0] + board[1][1] + board[2][2],
        board[0][2] + board[1][1] + board[2][0],
    ]
    return next((line[0] for line in lines if line in ("XXX", "OOO")), None)


def _board_from_prompt(prompt: str) -> list[str]:
    rows = [
        match.group(1).replace(" ", "")
        for line in prompt.splitlines()
        if (match := re.fullmatch(r"[123] ([XO.] [XO.] [XO.])", line.strip()))
    ]
    assert len(rows) == 3, prompt
    return rows
