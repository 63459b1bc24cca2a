"""What a person sees of an episode: a finished episode's transcript as HTML, Markdown and plain
text, a tool's answer that is still the plain string TRL reads, and dataset rows."""

from __future__ import annotations

import inspect
import pickle

import pytest

from corral.client import Bundle
from corral.client.display import ToolAnswer, show
from corral.protocol.frames import CallToolObservation
from tests.conftest import BUNDLES, serving

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
TICTACTOE_CALLS = [("place", {"row": 2, "col": 2}), ("end_turn", {"response": ""}), ("place", {"row": 9, "col": 1})]


@pytest.fixture(scope="module")
def tictactoe():
    for server in serving(BUNDLES / "tictactoe"):
        with Bundle(server.url, split="train") as env:
            yield env


@pytest.fixture(scope="module")
def finished(tictactoe):
    """A game of three calls, the last an illegal move that ends it: reward 0."""
    environment = tictactoe.factory()
    environment.reset(**tictactoe.dataset[0])
    answers = [getattr(environment, tool)(**arguments) for tool, arguments in TICTACTOE_CALLS]
    environment.get_reward()
    return environment, answers


def test_the_html_of_a_finished_episode_holds_every_call_and_the_reward(finished):
    environment, _ = finished
    page = environment._repr_html_()
    for shown_call in ("place(row=2, col=2)", "end_turn(response=&quot;&quot;)", "place(row=9, col=1)"):
        assert shown_call in page
    assert "O played row" in page  # the second turn's prompt
    assert "(9, 1) is off the board" in page  # the env's refusal, in its own words
    assert "<b>scores:</b> outcome=0" in page and "<b>reward:</b> 0" in page
    assert "New game. You are X and move first." in page and "tic-tac-toe as X" in page


def test_the_markdown_and_the_plain_text_hold_the_same_transcript(finished):
    environment, _ = finished
    markdown, text = environment._repr_markdown_(), str(environment)
    for shown in (markdown, text):
        assert shown.count("place(row=") == 2 and 'end_turn(response="")' in shown
        assert "(9, 1) is off the board" in shown
    assert "**reward:** 0" in markdown and "\nreward: 0" in text
    assert str(show(environment)) == text  # show() prints the plain text outside Jupyter
    assert repr(environment) == text  # what a terminal's REPL shows for `e`


def test_an_environment_before_its_first_episode_says_how_to_start_one(tictactoe):
    environment = tictactoe.factory()
    assert repr(environment) == str(environment)
    assert "no episode yet; call reset(**row) to start one" in repr(environment)


def test_a_tools_answer_is_the_plain_text_trl_reads_and_shows_itself(finished):
    _, answers = finished
    placed = answers[0]
    assert isinstance(placed, str) and isinstance(placed, ToolAnswer)
    assert str(placed) == placed == '{"legal":true,"board":["...",".X.","..."],"game_over":false}'
    assert type(str(placed)) is str  # what TRL puts in the tool message
    assert type(pickle.loads(pickle.dumps(placed))) is str
    assert "&quot;game_over&quot;:false" in placed._repr_html_()


def test_displaying_adds_no_tool(tictactoe):
    """TRL offers every public function of the class as a tool: display hides behind `_`."""
    functions = [
        name for name, _ in inspect.getmembers(tictactoe.factory, inspect.isfunction) if not name.startswith("_")
    ]
    assert sorted(functions) == ["end_turn", "get_reward", "place", "reset"]


def test_dataset_rows_show_their_task_and_prompt(tictactoe):
    row = show(tictactoe.dataset[0])
    assert "task tictactoe-000 (split train, index 0)" in str(row)
    assert "<summary><b>system</b></summary>" in row._repr_html_()  # the long system prompt folds
    rows = show(tictactoe.dataset, limit=3)
    assert "250 rows (the first 3)" in str(rows) and rows._repr_html_().count("<tr>") == 4
    assert "| index | task_id | split | prompt |" in rows._repr_markdown_()


def test_a_command_verifiers_output_shows_after_the_scores():
    ended = CallToolObservation(
        tool_name="end_turn",
        result="The episode has ended.",
        done=True,
        reward=0.0,
        status="scored",
        scores={"tests": 0.0},
        metadata={"verifier_output": {"tests": "FAILED test_sum\n[verifier tests: exit status 1; scored 0]"}},
    )
    text = str(show(ended))
    assert text.index("scores: tests=0") < text.index("reward: 0") < text.index("verifier output (tests):")
    assert "    FAILED test_sum" in text
    assert "<summary><b>verifier output (tests)</b></summary>" in show(ended)._repr_html_()
