"""Faults end only what they must: each ends its own episode with a clear reason, leaves no
process behind, and the server serves the next episode (local sandbox; docker's reaper has
tests/docker)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from corral.client import Bundle, Episode, Session
from corral.protocol.frames import ResetData
from tests.conftest import serving, wait_for_no_env_processes
from tests.probe_bundle import write_probe_bundle

pytestmark = [pytest.mark.timing, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    yield from serving(
        write_probe_bundle(tmp_path_factory.mktemp("faults")),
        max_concurrent_envs=12,
        reset_timeout_s=8.0,
        verifier_workers=2,
    )  # far from what a loaded machine takes


def test_a_server_is_up_only_once_its_verifier_workers_can_score(serve, tmp_path):
    server = serve(write_probe_bundle(tmp_path), verifier_workers=3)

    assert server.served.verifiers.booted == 3  # a fresh server's first reward waits for no interpreter


def episode_on(bundle: Bundle, task_id: str = "plain") -> Episode:
    """An episode of `task_id`, started on a session of its own."""
    episode = Episode(Session(bundle.url), bundle.limits)
    episode.start(ResetData(task_id=task_id))
    return episode


def play(bundle: Bundle, word: str, task_id: str = "plain") -> tuple[float | None, str | None]:
    """One episode that says `word`: its reward, and its reason when unscored."""
    episode = episode_on(bundle, task_id)
    try:
        episode.call("say", {"word": word})
        episode.finish()
        return episode.reward, episode.reason
    finally:
        episode.session.close()


def test_eight_hung_verifiers_cost_their_own_episodes_and_a_good_one_still_scores(probe):
    with Bundle(probe.url, split="all") as bundle:
        with ThreadPoolExecutor(8) as pool:
            hung = list(pool.map(lambda _: play(bundle, "hang"), range(8)))
        # The agent's word hung them: the task played untouched scores, so each is the agent's 0.
        assert all(
            reward == 0.0
            and "the verifiers did not finish within 8s" in reason
            and "the failure came from what the agent did" in reason
            for reward, reason in hung
        ), hung
        assert play(bundle, "apple") == (1.0, None)  # a fresh session, served while nothing hangs any more
        assert play(bundle, "pear") == (0.0, None)
    assert probe.served.verifiers.alive == 2  # each hung worker was killed and replaced, none piled up


def test_a_verifier_that_raises_ends_its_episode_unscored_with_why(probe):
    with Bundle(probe.url, split="all") as bundle:
        reward, reason = play(bundle, "apple", task_id="broken-judge")  # it raises on the untouched task too
        assert reward is None
        assert "verifier judge raised RuntimeError: the judge broke on purpose" in reason
        assert play(bundle, "apple") == (1.0, None)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_an_env_that_dies_ends_its_episode_with_env_died_and_the_next_plays(probe, how):
    with Bundle(probe.url, split="all") as bundle:
        episode = episode_on(bundle)
        died = episode.call("die", {"how": how})
        assert died.done and died.error.error_type == "transport_error"
        assert "the env died during die" in died.answer
        assert (episode.status, episode.reward) == ("failed", 0.0)  # the agent's doing: its failure score
        episode.session.close()
        assert wait_for_no_env_processes() == []
        assert play(bundle, "apple") == (1.0, None)


def test_a_reset_that_hangs_ends_unscored_at_the_deadline(probe):
    with Bundle(probe.url, split="all") as bundle:
        episode = episode_on(bundle, "slow-reset")
        assert episode.opened.done and episode.reward is None
        assert "the reset didn't finish within 8s" in episode.reason
        episode.session.close()
        assert wait_for_no_env_processes() == []
        assert play(bundle, "apple") == (1.0, None)


def test_a_huge_answer_is_cut_in_the_middle_and_huge_arguments_are_refused(probe):
    with Bundle(probe.url, split="all") as bundle:
        episode = episode_on(bundle)
        answer = episode.call("echo", {"size": 3_000_000}).answer
        assert len(answer) <= 1_000_000 and answer.startswith("aaa") and answer.endswith("bbb")
        assert "2,000,000 characters cut: the answer was 3,000,000, the server keeps 1,000,000" in answer
        refused = episode.call("say", {"word": "x" * 2_000_000})
        assert refused.error.error_type == "invalid_args" and refused.done is False
        assert "more than the 1,048,576 this server takes" in refused.error.message
        episode.call("say", {"word": "apple"})
        episode.finish()
        assert episode.reward == 1.0
        episode.session.close()
