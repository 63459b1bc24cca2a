"""The tictactoe bundle: games driven turn by turn through the env class, and their scores."""

import importlib.util
import json
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]
BUNDLE = ROOT / "bundles" / "tictactoe"
sys.path.insert(0, str(ROOT / "sandboxes"))

Board = list[list[str]]


def load(name: str, path: Path) -> ModuleType:
    """Import a bundle file by path (env.py and the verifier are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


env_module = load("tictactoe_env", BUNDLE / "envs" / "tictactoe" / "env.py")
outcome = load("tictactoe_outcome", BUNDLE / "verifiers" / "outcome.py")
generate = load("tictactoe_generate", BUNDLE / "generate.py")


def free(board: Board) -> list[tuple[int, int]]:
    return [(r + 1, c + 1) for r in range(3) for c in range(3) if board[r][c] == "."]


def wins(board: Board, mark: str) -> bool:
    return any(all(board[r][c] == mark for r, c in line) for line in env_module.LINES)


def careful(board: Board) -> tuple[int, int]:
    """Win if possible, else block O, else centre, corners, edges."""
    for mark in ("X", "O"):
        for r, c in free(board):
            board[r - 1][c - 1] = mark
            won = wins(board, mark)
            board[r - 1][c - 1] = "."
            if won:
                return r, c
    order = [(2, 2), (1, 1), (1, 3), (3, 1), (3, 3), (1, 2), (2, 1), (2, 3), (3, 2)]
    return next(square for square in order if square in free(board))


def careless(board: Board) -> tuple[int, int]:
    """The first free square in reading order."""
    return free(board)[0]


def game(seed: int, opponent: str) -> "env_module.TicTacToe":
    env = env_module.TicTacToe()
    env.reset({"seed": seed, "opponent": opponent})
    return env


def play(env: "env_module.TicTacToe", policy: Callable[[Board], tuple[int, int]]) -> list[str]:
    """Play X by `policy` until the env ends the game; return the prompts it sent back."""
    prompts = []
    while True:
        assert env.place(*policy(env.board))["legal"]
        prompt = env.end_turn("my move is made")
        if prompt is None:
            return prompts
        prompts.append(prompt)


def test_careful_play_beats_a_random_opponent() -> None:
    env = game(0, "random")
    play(env, careful)
    assert env.report()["outcome"] == "win"
    assert outcome.verify({}, env.report()) == 1.0


def test_careful_play_draws_a_tactical_opponent_that_blocks() -> None:
    env = game(1, "tactical")
    prompts = play(env, careful)
    assert len(prompts) == 4  # the fifth X fills the board
    assert env.report()["outcome"] == "draw"
    assert outcome.verify({}, env.report()) == 0.5


def test_careless_play_loses_to_a_tactical_opponent() -> None:
    env = game(0, "tactical")
    play(env, careless)
    report = env.report()
    assert report["outcome"] == "loss" and wins([list(row) for row in report["board"]], "O")
    assert outcome.verify({}, report) == 0.0


@pytest.mark.parametrize("seed", range(10))
def test_a_tactical_opponent_blocks_an_open_two(seed: int) -> None:
    env = game(seed, "tactical")
    env.place(2, 2)
    env.end_turn("centre")
    end = next((r, c) for r, c in free(env.board) if (4 - r, 4 - c) in free(env.board))
    env.place(*end)
    prompt = env.end_turn("threat")
    assert env.board[3 - end[0]][3 - end[1]] == "O"
    assert f"O played row {4 - end[0]}, column {4 - end[1]}." in prompt


def test_the_next_prompt_shows_o_move_and_the_board() -> None:
    env = game(3, "random")
    answer = env.place(2, 2)
    assert answer == {"legal": True, "board": ["...", ".X.", "..."], "game_over": False}
    prompt = env.end_turn("centre")
    [(r, c)] = [(r, c) for r in range(3) for c in range(3) if env.board[r][c] == "O"]
    assert prompt.startswith(f"O played row {r + 1}, column {c + 1}.\n\n")
    assert env_module.render(env.board) in prompt
    assert prompt.endswith("Your move: call place(row, col), then end_turn.")


@pytest.mark.parametrize(
    ("moves", "reason"),
    [
        ([(2, 2), (2, 2)], "a second place in one turn"),
        ([(0, 2)], "(0, 2) is off the board; rows and columns are 1-3"),
        ([(2, 4)], "(2, 4) is off the board; rows and columns are 1-3"),
    ],
)
def test_an_illegal_move_ends_the_game_as_a_loss(moves: list[tuple[int, int]], reason: str) -> None:
    env = game(0, "tactical")
    *_, answer = [env.place(*move) for move in moves]
    assert answer["legal"] is False and answer["game_over"] and answer["outcome"] == "illegal"
    assert reason in answer["error"]
    assert env.end_turn("oops") is None
    assert env.report()["reason"] == reason
    assert outcome.verify({}, env.report()) == 0.0


def test_placing_on_a_taken_square_is_illegal() -> None:
    env = game(0, "tactical")
    env.place(2, 2)
    env.end_turn("centre")
    [taken] = [(r + 1, c + 1) for r in range(3) for c in range(3) if env.board[r][c] == "O"]
    assert env.place(*taken)["error"].startswith(f"illegal move: {taken} is already taken")
    assert env.end_turn("oops") is None and env.report()["outcome"] == "illegal"


def test_ending_a_turn_without_a_move_loses() -> None:
    env = game(0, "random")
    assert env.end_turn("I pass") is None
    assert env.report() == {
        "outcome": "illegal",
        "reason": "the turn ended without a move",
        "board": ["...", "...", "..."],
    }


def test_a_finished_game_keeps_its_outcome() -> None:
    env = game(0, "random")
    play(env, careful)
    answer = env.place(1, 1)
    assert answer["legal"] is False and answer["outcome"] == "win"
    assert answer["error"] == "the game is over; call end_turn"
    assert env.report()["outcome"] == "win"


def test_an_unfinished_game_scores_0() -> None:
    env = game(0, "random")
    env.place(2, 2)
    assert env.report()["outcome"] == "unfinished"
    assert outcome.verify({}, env.report()) == 0.0


def test_the_env_offers_place_with_two_integers() -> None:
    [schema] = env_module.TicTacToe.tool_schemas()
    assert schema["name"] == "place"
    assert schema["inputSchema"]["properties"] == {
        "row": {"type": "integer", "description": "the row, 1 (top) to 3 (bottom)."},
        "col": {"type": "integer", "description": "the column, 1 (left) to 3 (right)."},
    }


def test_the_tasks_are_300_seeds_split_250_and_50() -> None:
    tasks = [json.loads(line) for line in (BUNDLE / "tasks.jsonl").read_text().splitlines()]
    assert tasks == [generate.task(seed) for seed in range(300)]
    assert {t["args"]["opponent"] for t in tasks} == {"random", "tactical"}
    splits = {
        name: tomllib.loads((BUNDLE / "evals" / f"{name}.toml").read_text())["tasks"] for name in ("train", "eval")
    }
    assert len(splits["train"]) == 250 and len(splits["eval"]) == 50
    assert set(splits["train"]) | set(splits["eval"]) == {t["id"] for t in tasks}
    empty = env_module.render([["."] * 3 for _ in range(3)])
    assert empty in generate.PROMPT
