"""`corral play` as a person uses it, typed into a real pseudo-terminal (pexpect): a GridSim idle
day with Tab completion and a refused call, a whole Tic-tac-toe game, and `--script`, which
replays a recorded session with the same transcript (against a URL with a token, too)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from tests.conftest import BUNDLES, serving

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
CORRAL = str(Path(sys.executable).with_name("corral"))
COLUMNS = 100
# pexpect's terminal does not answer cursor position requests: prompt_toolkit is told not to ask.
TERMINAL = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "PROMPT_TOOLKIT_NO_CPR": "1"}
TOKEN = "s3cret"


class Terminal:
    """`corral play ARGS` in a pseudo-terminal, read as a person reads the screen: escape
    sequences dropped. prompt_toolkit redraws the line being typed, so after each line the
    tests wait for its answer before waiting for the next prompt."""

    def __init__(self, *args: str):
        self.child = pexpect.spawn(
            CORRAL, ["play", *args], env=TERMINAL, dimensions=(50, COLUMNS), encoding="utf-8", timeout=60
        )
        self.raw, self.read_to = "", 0

    def wait_for(self, pattern: str, timeout_s: float = 60) -> re.Match:
        """The first match of `pattern` on the screen past the previous one's."""
        deadline = time.monotonic() + timeout_s
        while not (found := re.compile(pattern).search(self.screen(), self.read_to)):
            if time.monotonic() > deadline:
                raise AssertionError(f"the terminal never showed {pattern!r}; it shows:\n{self.screen()[-3000:]}")
            try:
                self.raw += self.child.read_nonblocking(4096, timeout=1)
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                raise AssertionError(
                    f"corral play exited before showing {pattern!r}:\n{self.screen()[-3000:]}"
                ) from None
        self.read_to = found.end()
        return found

    def type(self, text: str) -> None:
        self.child.send(text)

    def screen(self) -> str:
        return "\n".join(screen_lines(self.raw))

    def quit(self) -> int:
        self.child.sendline(":quit")
        self.raw += self.child.read()  # to the end
        self.child.close()
        return self.child.exitstatus


def screen_lines(raw: str) -> list[str]:
    """The terminal's output as lines of text: escape sequences and carriage returns dropped,
    episode ids (new every episode) masked."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>]", "", raw).replace("\r", "")
    text = re.sub(r"episode [0-9a-f]{6,}", "episode ID", text)
    return [line.rstrip() for line in text.split("\n")]


def is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    remaining = iter(haystack)
    return all(any(line == candidate for candidate in remaining) for line in needles)


@pytest.fixture(scope="module")
def gridsim_by_hand(tmp_path_factory):
    """An idle GridSim day typed by hand, recorded: the schedule typed with Tab completion of the
    tool and its argument, then two refused calls (the wrong number of hours, as JSON; a value
    that is not a list), :state, :end. Returns what the terminal showed and the record."""
    record = tmp_path_factory.mktemp("play") / "idle-day.jsonl"
    terminal = Terminal("bundles/gridsim", "--sandbox", "local", "--record", str(record))
    terminal.wait_for("gridsim>")
    terminal.type("subm\t")  # completes the tool's name (nothing in the history to suggest yet)...
    terminal.wait_for("submit_schedule")
    terminal.type(" act\t")  # ...and its argument's
    terminal.wait_for("actions=")
    terminal.type("[" + ",".join(["0"] * 24) + "]\r")
    terminal.wait_for("profit_usd")
    terminal.wait_for("gridsim>")
    terminal.type('{"tool": "submit_schedule", "arguments": {"actions": [0, 0]}}\r')
    terminal.wait_for("got 2")
    terminal.wait_for("gridsim>")
    terminal.type("submit_schedule actions=nope\r")
    terminal.wait_for("invalid_args")
    terminal.wait_for("gridsim>")
    terminal.type(":state\r")
    terminal.wait_for("step_count: 3")
    terminal.wait_for("gridsim>")
    terminal.type(":end\r")
    terminal.wait_for(r"reward: 0\.2")
    terminal.wait_for("gridsim>")
    assert terminal.quit() == 0
    return screen_lines(terminal.raw), record


def test_an_idle_day_typed_by_hand_scores_0_2(gridsim_by_hand):
    lines, _ = gridsim_by_hand
    call = "[1] submit_schedule(actions=[" + ", ".join(["0"] * 24) + "])"
    assert call in lines  # typed with Tab completion
    assert lines.index("scores: grade=0.2") < lines.index("reward: 0.2")


def test_a_refused_call_shows_the_envs_message_and_play_goes_on(gridsim_by_hand):
    lines, _ = gridsim_by_hand
    screen = "\n".join(lines)
    assert '{"submitted":false,"error":"expected exactly 24 integers, got 2"}' in screen
    assert "error: invalid_args: submit_schedule: argument 'actions' must be an array of integers" in screen
    assert '[4] end_turn(response="")' in screen  # the session went on to the end


def test_a_script_replays_the_session_with_the_same_transcript(gridsim_by_hand):
    lines, record = gridsim_by_hand
    assert [json.loads(line)["tool"] for line in record.read_text().splitlines()] == [
        "submit_schedule",
        "submit_schedule",
        "submit_schedule",
        "end_turn",
    ]
    replay = subprocess.run(
        [CORRAL, "play", "bundles/gridsim", "--sandbox", "local", "--script", str(record)],
        capture_output=True,
        text=True,
        env=TERMINAL,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 0, replay.stderr
    transcript = [line for line in screen_lines(replay.stdout) if line]
    assert transcript[0] == "task gridsim-2014-01-02 · episode ID" and transcript[-1] == "reward: 0.2"
    assert is_subsequence(transcript, lines)


def test_a_script_plays_a_served_url_with_its_token(gridsim_by_hand):
    lines, record = gridsim_by_hand
    for server in serving(BUNDLES / "gridsim", token=TOKEN):
        refused = subprocess.run(
            [CORRAL, "play", server.url, "--script", str(record)],
            capture_output=True,
            text=True,
            env=TERMINAL,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2 and "wants a bearer token and none was sent" in refused.stderr
        assert "pass --token TOKEN or set CORRAL_TOKEN" in refused.stderr and "token=..." not in refused.stderr
        replay = subprocess.run(
            [CORRAL, "play", server.url, "--script", str(record)],
            capture_output=True,
            text=True,
            env={**TERMINAL, "CORRAL_TOKEN": TOKEN},
            timeout=60,
            check=False,
        )
        assert replay.returncode == 0, replay.stderr
        assert is_subsequence([line for line in screen_lines(replay.stdout) if line], lines)


def test_a_whole_tictactoe_game_typed_turn_by_turn_scores_its_true_outcome():
    """Each turn a careful X from the terminal; the same moves in the env itself, beside the
    session, say what O answers and how the game truly ends."""
    task = next(
        json.loads(line)
        for line in (BUNDLES / "tictactoe" / "tasks.jsonl").read_text().splitlines()
        if json.loads(line)["id"] == "tictactoe-002"
    )
    game = tictactoe_env().TicTacToe()
    game.reset(task["args"])
    terminal = Terminal("bundles/tictactoe", "--sandbox", "local", "--task", task["id"])
    turns = 0
    while True:
        terminal.wait_for("tictactoe>")
        row, col = careful(game.board)
        game.place(row, col)
        terminal.type(f"place row={row} col={col}\r")
        terminal.wait_for("game_over")
        terminal.wait_for("tictactoe>")
        terminal.type(":end my move is made\r")
        turns += 1
        following = game.end_turn("my move is made")
        if following is None:
            break
        terminal.wait_for(re.escape(following.splitlines()[0]))  # O's move, as the env played it
    expected = {"win": 1, "draw": 0.5}.get(game.report()["outcome"], 0)
    assert float(terminal.wait_for(r"reward: (\S+)").group(1)) == expected
    assert terminal.quit() == 0
    assert turns >= 3
    assert 'end_turn(response="my move is made")' in terminal.screen()


def tictactoe_env():
    spec = importlib.util.spec_from_file_location(
        "tictactoe_env", BUNDLES / "tictactoe" / "envs" / "tictactoe" / "env.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def careful(board: list[list[str]]) -> tuple[int, int]:
    """X's move: win if it can, else block O, else the centre, a corner, an edge (rows and
    columns 1-3)."""
    free = [(r, c) for r in range(3) for c in range(3) if board[r][c] == "."]
    lines = [[(r, c) for c in range(3)] for r in range(3)] + [[(r, c) for r in range(3)] for c in range(3)]
    lines += [[(i, i) for i in range(3)], [(i, 2 - i) for i in range(3)]]
    for mark in ("X", "O"):
        for r, c in free:
            board[r][c] = mark
            completes = any(all(board[a][b] == mark for a, b in line) for line in lines)
            board[r][c] = "."
            if completes:
                return r + 1, c + 1
    order = [(1, 1), (0, 0), (0, 2), (2, 0), (2, 2), (0, 1), (1, 0), (1, 2), (2, 1)]
    r, c = next(square for square in order if square in free)
    return r + 1, c + 1


def test_a_script_shows_a_command_verifiers_output(tmp_path):
    """A shellfix task left unfixed: its hidden tests fail, and their output follows the score."""
    script = tmp_path / "give-up.jsonl"
    script.write_text(
        '# end the turn without fixing anything\n{"tool": "end_turn", "arguments": {"response": "done"}}\n'
    )
    played = subprocess.run(
        [CORRAL, "play", "bundles/shellfix", "--sandbox", "local", "--script", str(script)],
        capture_output=True,
        text=True,
        env=TERMINAL,
        timeout=120,
        check=False,
    )
    assert played.returncode == 0, played.stderr  # scored, if 0
    lines = screen_lines(played.stdout)
    assert lines.index("scores: tests=0") < lines.index("reward: 0") < lines.index("verifier output (tests):")
    assert "    [verifier tests: exit status 1; scored 0]" in lines
