"""`corral/episode/fork` by replay, on the local sandbox: a tictactoe game forked mid-play; the
copies answer as the original does and end on their own; the refusals (capacity, an env that
declares no fork mode, an env that answers otherwise on replay) leave nothing behind."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from corral.client.episode import Episode
from corral.client.session import Session
from corral.errors import CapacityError, ServerError
from corral.protocol.frames import ForkRefusal, Limits, ResetData
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import BUNDLES, FIXTURES, env_processes, serving, wait_for_no_env_processes
from tests.wire import called, mcp, opened, rpc, send, ws

GAME = "tictactoe-002"  # O plays at random, from the task's seed
SQUARES = [(r, c) for r in (1, 2, 3) for c in (1, 2, 3)]


@pytest.fixture(scope="module")
def tictactoe() -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "tictactoe", max_concurrent_envs=5)


def episode_on(server: EmbeddedServer, task_id: str | None = None, **reset: Any) -> Episode:
    metadata = httpx.get(f"{server.url}/metadata", trust_env=False).json()
    episode = Episode(Session(server.url), Limits.model_validate({key: metadata[key] for key in Limits.model_fields}))
    episode.start(ResetData(task_id=task_id, **reset))
    return episode


def play_out(episode: Episode, squares: list[tuple[int, int]]) -> list[str]:
    """Play to the end: each turn X on the first square of `squares` free on the board; the
    answers from here on."""
    first = len(episode.calls)
    while episode.open:
        board = board_of(episode)
        row, col = next((r, c) for r, c in squares if board[r - 1][c - 1] == ".")
        episode.call("place", {"row": row, "col": col})
        episode.end_turn("")
    return [record.observation.answer for record in episode.calls[first:]]


def board_of(episode: Episode) -> list[str]:
    """The board as the last answer shows it (the turn's prompt, or a place's JSON)."""
    last = episode.calls[-1].observation.answer if episode.calls else episode.opened.prompt
    if last.startswith("{"):
        return json.loads(last)["board"]
    rows = [line for line in last.splitlines() if line[:1] in "123" and line[1:2] == " "]
    return [row[2:].replace(" ", "") for row in rows]


def sessions_on(server: EmbeddedServer) -> int:
    return httpx.get(f"{server.url}/health", trust_env=False).json()["sessions"]


def sessions_left(server: EmbeddedServer, timeout_s: float = 10.0) -> int:
    """The sessions still open once closed ones are gone: a client's close returns before the
    server has released the session (on a loaded machine, noticeably)."""
    deadline = time.monotonic() + timeout_s
    while (left := sessions_on(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_metadata_advertises_the_fork_modes_of_the_bundles_envs(tictactoe):
    assert httpx.get(f"{tictactoe.url}/metadata", trust_env=False).json()["fork_modes"] == {"tictactoe": "replay"}


def test_a_game_forked_three_ways_mid_play_plays_on_in_each_copy_and_the_original_is_untouched(tictactoe):
    reference = episode_on(tictactoe, GAME)  # the same game, never forked
    reference.call("place", {"row": 1, "col": 1})
    reference.end_turn("")
    expected = play_out(reference, SQUARES)
    reference.session.close()

    original = episode_on(tictactoe, GAME)
    original.call("place", {"row": 1, "col": 1})
    original.end_turn("")
    copies = original.fork(3)
    assert len({copy.session.session_id for copy in copies}) == 3
    assert {copy.opened.episode_id for copy in copies}.isdisjoint({original.opened.episode_id})
    try:
        assert play_out(original, SQUARES) == expected  # as if it had never been forked
        assert (original.status, original.reward) == (reference.status, reference.reward)
        original.session.close()  # its copies play on
        assert play_out(copies[0], SQUARES) == expected  # the copy answers as the original did
        assert (copies[0].status, copies[0].reward) == (reference.status, reference.reward)
        # Another copy diverges: (1, 1) is its own X already, so it loses, on its own.
        taken = copies[1].call("place", {"row": 1, "col": 1})
        assert "illegal move" in taken.answer
        copies[1].end_turn("")
        assert (copies[1].status, copies[1].reward) == ("scored", 0.0)
        # The third plays other squares, and is scored as what it did.
        diverged = play_out(copies[2], list(reversed(SQUARES)))
        assert diverged != expected and copies[2].status == "scored"
        assert reference.reward != 0.0  # so the loss above was the copy's own
    finally:
        for episode in (original, *copies):
            episode.session.close()
    assert wait_for_no_env_processes() == []


def test_a_gridsim_day_forked_after_a_schedule_scores_that_schedule_in_the_copy_and_its_own_in_another(
    gridsim_server,
):
    original = episode_on(gridsim_server, split="eval", index=0)
    original.call("submit_schedule", {"actions": [0] * 8 + [-1] + [0] * 15})  # sells at 8
    same, other = original.fork(2)
    try:
        other.call("submit_schedule", {"actions": [0] * 24})  # the last submission counts
        for episode in (original, same, other):
            episode.end_turn("done")
        assert original.reward is not None and original.reward > 0.2  # better than idle: the schedule counted
        assert same.reward == original.reward and same.scores == original.scores
        assert other.reward == pytest.approx(0.2)  # the idle day it submitted last
    finally:
        for episode in (original, same, other):
            episode.session.close()


def test_a_session_made_over_http_forks_over_post_mcp_and_its_copy_is_attached_by_id(tictactoe):
    post = lambda body: httpx.post(f"{tictactoe.url}/mcp", json=body, trust_env=False).json()
    created = post({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"})["result"]["session_id"]
    fork = {"jsonrpc": "2.0", "id": 2, "method": "corral/episode/fork", "params": {"session_id": created, "n": 1}}
    assert post(fork)["error"]["data"]["code"] == ForkRefusal.NO_EPISODE  # before its reset
    none = {**fork, "params": {"session_id": created, "n": 0}}
    assert post(none)["error"]["code"] == -32602
    with ws(tictactoe, f"?session_id={created}") as socket:
        opened(socket, task_id=GAME)
        first = called(socket, "place", row=2, col=2).answer
        (copy,) = post(fork)["result"]["session_ids"]
        then = called(socket, "end_turn", response="").answer
    with ws(tictactoe, f"?session_id={copy}") as socket:
        assert called(socket, "end_turn", response="").answer == then
    called_over_http = {"name": "place", "arguments": {"row": 2, "col": 2}, "session_id": copy}
    taken = post({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": called_over_http})["result"]
    assert "illegal move" in taken["data"] and first.startswith('{"legal":true')
    for session_id in (created, copy):
        post({"jsonrpc": "2.0", "id": 4, "method": "openenv/session/close", "params": {"session_id": session_id}})
    assert sessions_on(tictactoe) == 0


def test_a_fork_past_the_session_limit_is_refused_whole(tictactoe):
    original = episode_on(tictactoe, GAME)  # 1 of the 5 sessions
    original.call("place", {"row": 1, "col": 1})
    envs_before = len(env_processes())
    assert envs_before == 1
    try:
        with pytest.raises(CapacityError) as refused:
            original.fork(5)
        assert sessions_on(tictactoe) == 1 and len(env_processes()) == envs_before  # nothing started
        assert refused.value.code == ForkRefusal.CAPACITY_REACHED and "refused whole" in str(refused.value)
        copies = original.fork(4)  # exactly the room left
        assert sessions_on(tictactoe) == 5
        for copy in copies:
            copy.session.close()
    finally:
        original.session.close()
    assert sessions_left(tictactoe) == 0


def test_an_env_that_declares_no_fork_mode_is_refused_naming_the_fix(serve):
    server = serve(FIXTURES / "toybox", max_concurrent_envs=3)
    episode = episode_on(server, "count-3")
    episode.call("add", {"amount": 1})
    with pytest.raises(ServerError) as refused:
        episode.fork(2)
    assert refused.value.code == ForkRefusal.FORK_UNSUPPORTED
    assert 'fork = "replay" in envs/counter/env.toml' in str(refused.value)
    assert sessions_on(server) == 1
    assert episode.call("add", {"amount": 2}).answer == "3"  # the original plays on
    episode.session.close()
    assert httpx.get(f"{server.url}/metadata", trust_env=False).json()["fork_modes"] == {}


def test_a_replay_that_answers_otherwise_refuses_the_fork_and_closes_the_copies(serve):
    server = serve(FIXTURES / "dicebox", max_concurrent_envs=4)
    with ws(server) as socket:
        opened(socket, task_id="roll")
        rolled = called(socket, "roll").answer
        refused = rpc(send(socket, mcp("corral/episode/fork", {"n": 2}))).error
        assert refused is not None and refused.data["code"] == ForkRefusal.REPLAY_MISMATCH
        assert f"where the episode had '{rolled}'" in refused.message and "remove fork" in refused.message
        assert sessions_on(server) == 1
        assert called(socket, "end_turn", response="").reward == 1.0  # the original is scored as before
    assert wait_for_no_env_processes() == []
