"""TicTacToe: a multi-turn game, the agent as X (moving first) against a seeded O.

Each agent turn places exactly one X with `place`, then ends with end_turn; the env's
`end_turn` hook plays O and returns the next turn's prompt, or None once the game is over.
Squares are (row, col), both 1-3, row 1 at the top and column 1 at the left.
An illegal move (occupied or out-of-range square, a second place in one turn) or a turn
ended without a move ends the game as a loss, reported as "illegal".
"""

import random

from corral.env import Env, tool

LINES = (
    [[(r, c) for c in range(3)] for r in range(3)]
    + [[(r, c) for r in range(3)] for c in range(3)]
    + [[(i, i) for i in range(3)], [(i, 2 - i) for i in range(3)]]
)


class TicTacToe(Env):
    """One game. Task args: `seed` (O's random choices) and `opponent`: "tactical" (win if
    it can, else block X, else a random square) or "random" (any free square)."""

    def reset(self, args: dict) -> None:
        self.rng = random.Random(args["seed"])
        self.tactical = args["opponent"] == "tactical"
        self.board = [["."] * 3 for _ in range(3)]
        self.outcome: str | None = None  # "win", "draw", "loss" or "illegal" once decided
        self.reason: str | None = None  # why, when the outcome is "illegal"
        self.moved = False  # whether X has placed this turn

    @tool
    def place(self, row: int, col: int) -> dict:
        """Place your X; exactly one per turn, then call end_turn.

        Args:
            row: the row, 1 (top) to 3 (bottom).
            col: the column, 1 (left) to 3 (right).
        """
        if self.outcome is not None:
            return self._answer(False, "the game is over; call end_turn")
        if self.moved:
            return self._lose("a second place in one turn")
        if not (1 <= row <= 3 and 1 <= col <= 3):
            return self._lose(f"({row}, {col}) is off the board; rows and columns are 1-3")
        if self.board[row - 1][col - 1] != ".":
            return self._lose(f"({row}, {col}) is already taken")
        self.board[row - 1][col - 1] = "X"
        self.moved = True
        if _winner(self.board) == "X":
            self.outcome = "win"
        elif not _free(self.board):
            self.outcome = "draw"
        return self._answer(True, None)

    def end_turn(self, response: str) -> str | None:
        """Play O after X's move; the next prompt, or None when the game is over."""
        if self.outcome is None and not self.moved:
            self._lose("the turn ended without a move")
        if self.outcome is not None:
            return None
        row, col = self._o_move()
        self.board[row][col] = "O"
        self.moved = False
        if _winner(self.board) == "O":
            self.outcome = "loss"
            return None
        return (
            f"O played row {row + 1}, column {col + 1}.\n\n{render(self.board)}\n\n"
            f"Your move: call place(row, col), then end_turn."
        )

    def report(self) -> dict:
        """The outcome ("unfinished" if the episode stopped mid-game) and the final board."""
        return {
            "outcome": self.outcome or "unfinished",
            "reason": self.reason,
            "board": ["".join(row) for row in self.board],
        }

    def _o_move(self) -> tuple[int, int]:
        free = _free(self.board)
        if self.tactical:
            for mark in ("O", "X"):  # complete O's line, else block X's
                for square in free:
                    r, c = square
                    self.board[r][c] = mark
                    done = _winner(self.board) == mark
                    self.board[r][c] = "."
                    if done:
                        return square
        return self.rng.choice(free)

    def _lose(self, reason: str) -> dict:
        self.outcome, self.reason = "illegal", reason
        return self._answer(False, f"illegal move: {reason}; the game is over and counts as a loss")

    def _answer(self, legal: bool, error: str | None) -> dict:
        answer = {"legal": legal, "board": ["".join(row) for row in self.board], "game_over": self.outcome is not None}
        if error is not None:
            answer["error"] = error
        if self.outcome is not None:
            answer["outcome"] = self.outcome
        return answer


def render(board: list[list[str]]) -> str:
    """The board as the prompts show it, with row and column numbers."""
    return "  1 2 3\n" + "\n".join(f"{r + 1} " + " ".join(row) for r, row in enumerate(board))


def _free(board: list[list[str]]) -> list[tuple[int, int]]:
    return [(r, c) for r in range(3) for c in range(3) if board[r][c] == "."]


def _winner(board: list[list[str]]) -> str | None:
    for line in LINES:
        marks = {board[r][c] for r, c in line}
        if len(marks) == 1 and marks != {"."}:
            return marks.pop()
    return None
