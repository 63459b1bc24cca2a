"""The server owns the turn budget (`max_turns` in a reset's limits: the task's, which a client
may lower, never raise): at the budget's last turn it scores what the agent left. A client that
closes the turns an agent left open ends scored, never unscored, however many rounds the game
has; a cap of its own past the server's word ends at the task's failure score."""

from __future__ import annotations

import pytest

from corral.client import Bundle, Episode, Session
from corral.protocol.frames import ResetData
from tests.conftest import serving
from tests.probe_bundle import write_probe_bundle
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")

ROUNDS = 100  # the "rounds" task's max_turns


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    yield from serving(write_probe_bundle(tmp_path_factory.mktemp("turns")), max_concurrent_envs=2)


def test_a_100_round_game_the_agent_stops_playing_ends_scored_0_through_the_client(probe):
    bundle = Bundle(probe.url)
    assert bundle.limits.max_turns == ROUNDS  # /metadata: the most any task plays
    episode = Episode(Session(probe.url), bundle.limits)
    episode.start(ResetData(task_id="rounds"))
    episode.call("say", {"word": "pear"})

    episode.finish()  # the agent stopped acting: empty closing turns
    episode.session.close()

    assert (episode.status, episode.reward, episode.reason) == ("scored", 0.0, None)
    assert [call.tool for call in episode.calls].count("end_turn") == ROUNDS


def test_a_client_may_lower_the_turn_budget_and_never_raise_it(probe):
    with ws(probe) as socket:
        raised = opened(socket, task_id="rounds", max_turns=10 * ROUNDS)
        assert raised.limits.max_turns == ROUNDS
        assert f"max_turns={10 * ROUNDS} asked" in raised.metadata["limits"][0], raised.metadata
        turns = [called(socket, "end_turn", response="") for _ in range(ROUNDS)]
        assert not any(turn.done for turn in turns[:-1]) and (turns[-1].status, turns[-1].reward) == ("scored", 0.0)

        lowered = opened(socket, task_id="rounds", max_turns=3)
        assert lowered.limits.max_turns == 3 and not lowered.metadata.get("limits")
        turns = [called(socket, "end_turn", response="") for _ in range(3)]
        assert [turn.done for turn in turns] == [False, False, True] and turns[-1].reward == 0.0


def test_a_client_s_own_cap_past_the_server_s_word_ends_at_the_failure_score(probe):
    episode = Episode(Session(probe.url), Bundle(probe.url).limits)
    episode.start(ResetData(task_id="rounds"))
    episode.limits = episode.limits.model_copy(update={"max_turns": 5})  # a budget the server never said

    episode.finish()
    episode.session.close()

    assert (episode.status, episode.reward) == ("failed", -1.0), episode.reason
    assert "did not end after 5 empty turns" in (episode.reason or "")
