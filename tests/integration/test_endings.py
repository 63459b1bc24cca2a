"""Unscored is no refuge (local sandbox; tests/docker has the same on containers): what the
agent causes scores the task's failure score, never null; the verifier still runs where a
verdict is possible; only the platform's own failures are left unscored, and a failure after
the agent acted is the platform's only when the same task, played untouched, fails too."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from corral.client import Bundle, Episode, Session
from corral.errors import SandboxError
from corral.protocol.frames import CallToolObservation, Limits, ResetData
from corral.protocol.record_store import EpisodeStore
from corral.sandboxes.local.provider import LocalProvider
from corral.sandboxes.local.sandbox import LocalSandbox
from tests.conftest import BUNDLES, serving
from tests.probe_bundle import write_probe_bundle
from tests.wire import call, called, observed, opened, send, ws

pytestmark = [pytest.mark.timing, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    yield from serving(
        write_probe_bundle(tmp_path_factory.mktemp("endings")),
        max_concurrent_envs=4,
        tool_timeout_s=2,
        reset_timeout_s=8,
    )  # far from what a loaded machine takes; the hangs provoked are minutes


def episode_on(server, task_id: str = "plain") -> Episode:
    limits = Limits.model_validate(
        {
            key: value
            for key, value in httpx.get(f"{server.url}/metadata", trust_env=False).json().items()
            if key in Limits.model_fields
        }
    )
    episode = Episode(Session(server.url), limits)
    episode.start(ResetData(task_id=task_id))
    return episode


def ended(episode: Episode) -> tuple[str | None, float | None, str | None]:
    episode.finish()
    episode.session.close()
    return episode.status, episode.reward, episode.reason


def test_a_tool_past_its_deadline_on_the_agents_input_scores_the_failure_score(probe):
    episode = episode_on(probe)
    assert episode.call("spin", {"seconds": 30}).error.error_type == "timeout"
    status, reward, reason = ended(episode)
    assert (status, reward) == ("failed", 0.0) and "spin didn't answer within 2s" in reason
    budget = episode_on(probe, "budget")  # a task's own failure score
    budget.call("spin", {"seconds": 30})
    assert ended(budget)[:2] == ("failed", -1.0)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_an_env_the_agent_made_die_scores_the_failure_score(probe, how):
    episode = episode_on(probe)
    episode.call("die", {"how": how})
    status, reward, reason = ended(episode)
    assert (status, reward) == ("failed", 0.0) and "the env died during die" in reason


def test_processes_left_running_and_a_full_folder_do_not_stop_the_verifier(probe):
    episode = episode_on(probe)
    episode.call("leave_running", {"count": 40})
    episode.call("fill", {"megabytes": 50})
    episode.call("say", {"word": "apple"})
    assert ended(episode) == ("scored", 1.0, None)


def test_the_agents_time_budget_ends_its_turn_and_what_it_left_is_scored(probe):
    idle = episode_on(probe, "budget")
    idle.call("say", {"word": "apple"})
    time.sleep(2)  # past its 1.5 s: the next call finds the budget spent, and the episode scored
    late = idle.call("say", {"word": "pear"})
    assert late.done and "the agent's time budget of 1.5s ran out" in late.answer
    assert ended(idle) == ("scored", 1.0, "the agent's time budget of 1.5s ran out")
    busy = episode_on(probe, "budget")  # cut in a tool call: the env is busy, nothing to report
    busy.call("say", {"word": "apple"})
    cut = busy.call("spin", {"seconds": 30})
    assert cut.done
    status, reward, reason = ended(busy)
    assert (status, reward) == ("failed", -1.0) and "could not report" in reason


def test_a_time_budget_that_runs_out_while_the_env_takes_the_reply_is_the_budget_s_end(probe):
    stalled = episode_on(probe, "budget")
    stalled.call("say", {"word": "stall"})  # end_turn hangs: the 1.5 s budget runs out before the 3 s turn timeout
    status, reward, reason = ended(stalled)
    assert (status, reward) == ("failed", -1.0) and reason.startswith("the agent's time ran out while the env was busy")


UNTOUCHED_SCORED = (
    "the same task played untouched in a fresh sandbox was scored, so the failure came from what the agent did"
)
UNTOUCHED_FAILED = "and the same task played untouched in a fresh sandbox failed too"


def test_platform_failures_stay_unscored_with_their_reason(probe):
    stuck = episode_on(probe, "slow-reset")  # the env's own reset hangs: the bundle's bug
    assert ended(stuck)[:2] == ("unscored", None)
    episode = episode_on(probe, "broken-judge")  # the verifier raises whatever the agent does
    episode.call("say", {"word": "apple"})
    status, reward, reason = ended(episode)
    assert (status, reward) == ("unscored", None) and "verifier judge raised RuntimeError" in reason
    assert UNTOUCHED_FAILED in reason and reason.count("verifier judge raised RuntimeError") == 2, reason  # both


@pytest.mark.parametrize(
    ("word", "cause"),
    [
        ("raise", "verifier judge raised RuntimeError"),
        ("hang", "the verifiers did not finish within 8s"),
        ("unreportable", "the env's own code failed"),
    ],
)
def test_a_verifier_or_hook_the_agent_made_fail_is_the_agents_failure(probe, word, cause):
    """The agent's own state made the bundle's code fail (a report it shaped, a verifier input it
    chose): an untouched episode of the task scores, so the failure is the agent's."""
    episode = episode_on(probe)
    episode.call("say", {"word": word})
    status, reward, reason = ended(episode)
    assert (status, reward) == ("failed", 0.0) and cause in reason and UNTOUCHED_SCORED in reason


def test_an_answer_corral_cannot_handle_is_judged_by_evidence_not_left_unscored(serve, tmp_path, monkeypatch):
    """corral's own reading of an env's answer failing (an answer shaped to break it) is no way
    out of a 0: the episode is judged by an untouched replay, which scores."""
    import corral.server.episodes.episode

    def breaks(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(corral.server.episodes.episode, "tool_answer", breaks)
    records = tmp_path / "records"
    server = serve(write_probe_bundle(tmp_path), max_concurrent_envs=1, record_dir=records)
    episode = episode_on(server)
    answered = episode.call("say", {"word": "apple"})
    assert answered.done and "corral could not handle what the env answered to say: RecursionError" in answered.answer
    status, reward, reason = ended(episode)
    server.stop()  # writes what is queued
    assert (status, reward) == ("failed", 0.0) and UNTOUCHED_SCORED in reason
    with EpisodeStore(records) as store:
        assert store.episode(episode.opened.episode_id).cause == "unreadable"


# Each ending, brought about on the probe bundle: the task, the agent's calls, and the outcome
# docs/bundle-format.md promises (status, reward). The agent's doing scores the task's failure
# score; the platform's (the bundle's own code, failing on the untouched task too) is left unscored.
PROVOKED = {
    "scored": ("plain", [("say", {"word": "apple"})], ("scored", 1.0)),
    "tool_timeout": ("plain", [("spin", {"seconds": 30})], ("failed", 0.0)),
    "env_died": ("plain", [("die", {"how": "exit"})], ("failed", 0.0)),
    "turn_timeout": ("plain", [("say", {"word": "stall"})], ("failed", 0.0)),
    "time_budget": ("budget", [("say", {"word": "apple"}), ("spin", {"seconds": 30})], ("failed", -1.0)),
    "reset_timeout": ("slow-reset", [], ("unscored", None)),
    "env_start_failed": ("broken-reset", [], ("unscored", None)),
    "env_hook_failed": ("broken-report", [("say", {"word": "apple"})], ("unscored", None)),
    "verify_timeout": ("hung-judge", [("say", {"word": "apple"})], ("unscored", None)),
    "scoring_failed": ("broken-judge", [("say", {"word": "apple"})], ("unscored", None)),
    "reward_failed": ("plain", [("say", {"word": "pear"})], ("unscored", None)),  # 1 / 0.0, below, untouched too
    "abandoned": ("plain", [("say", {"word": "apple"})], ("unscored", None)),  # its session closes first
}


def test_each_ending_is_recorded_with_its_cause_status_and_reward(serve, tmp_path, caplog):
    """sandbox_failed is not here: the local sandbox has no engine to lose (the next test
    fakes one; tests/docker stops a real one); nor is unreadable, which no answer provokes once
    corral reads answers as it should (a test above breaks the reading to see it)."""
    caplog.set_level(logging.WARNING, logger="corral.server")
    records = tmp_path / "records"
    server = serve(
        write_probe_bundle(tmp_path),
        max_concurrent_envs=len(PROVOKED),
        tool_timeout_s=2,
        reset_timeout_s=8,
        record_dir=records,
        reward=lambda scores: 1 / scores["judge"],
    )

    def play(cause: str) -> tuple[str, tuple, tuple]:
        task_id, calls, _ = PROVOKED[cause]
        episode = episode_on(server, task_id)
        for name, arguments in calls:
            episode.call(name, arguments)
        if cause != "abandoned":
            episode.finish()
        episode.session.close()
        return episode.opened.episode_id, (episode.status, episode.reward), (episode.cause, episode.seconds)

    with ThreadPoolExecutor(len(PROVOKED)) as pool:
        played = dict(zip(PROVOKED, pool.map(play, PROVOKED), strict=True))
    server.stop()  # writes what is queued

    with EpisodeStore(records) as store:
        found = {cause: store.episode(episode_id) for cause, (episode_id, *_) in played.items()}
    assert {cause: (record.cause, record.status, record.reward) for cause, record in found.items()} == {
        cause: (cause, *outcome) for cause, (_, _, outcome) in PROVOKED.items()
    }
    seen_by_client = {cause: outcome for cause, (_, outcome, _) in played.items() if cause != "abandoned"}
    assert seen_by_client == {cause: outcome for cause, (_, _, outcome) in PROVOKED.items() if cause != "abandoned"}
    # The ending's cause and seconds reach the client too (a trainer counts them per step), as recorded.
    for cause, (_, _, (client_cause, seconds)) in played.items():
        if cause != "abandoned":
            assert (client_cause, seconds) == (cause, pytest.approx(found[cause].seconds, abs=1e-3)), cause
    # The operator is warned of each episode the platform failed while a client was there to see it.
    warned = {
        record.args[0]
        for record in caplog.records
        if record.getMessage().startswith("episode ") and "ended unscored" in record.getMessage()
    }
    assert warned == {
        episode_id
        for cause, (episode_id, (status, _), _) in played.items()
        if status == "unscored" and cause != "abandoned"
    }


def test_an_agents_ending_while_the_provider_fails_is_the_platforms_and_unscored(serve, tmp_path, monkeypatch):
    """The env died, but the provider itself has stopped answering (as a stopped engine does):
    the platform failed, so the episode is unscored (sandbox_failed) with both reasons."""

    async def engine_gone(provider) -> None:
        raise SandboxError("the sandbox engine stopped answering")

    monkeypatch.setattr(LocalProvider, "check", engine_gone)
    records = tmp_path / "records"
    server = serve(write_probe_bundle(tmp_path), max_concurrent_envs=1, record_dir=records)
    episode = episode_on(server)
    episode.call("die", {"how": "exit"})
    status, reward, reason = ended(episode)
    server.stop()  # writes what is queued
    assert (status, reward) == ("unscored", None)
    assert "the env died during die" in reason and "the sandbox engine stopped answering" in reason
    with EpisodeStore(records) as store:
        assert store.episode(episode.opened.episode_id).cause == "sandbox_failed"


def test_get_reward_tells_the_trainers_log_why_a_rollout_has_no_reward_or_a_failure_score(probe, caplog):
    caplog.set_level(logging.INFO, logger="corral.client")
    with Bundle(probe.url, split="all") as env:
        environment = env.factory()
        environment.reset(task_id="slow-reset")
        assert environment.get_reward() is None
        environment.reset(task_id="plain")
        environment.die(how="exit")
        assert environment.get_reward() == 0.0
        environment.reset(task_id="plain")
        environment.say(word="apple")
        assert environment.get_reward() == 1.0
    told = [(record.levelname, record.getMessage()) for record in caplog.records if "rollout" in record.getMessage()]
    assert [(level, message.split(":")[0]) for level, message in told] == [
        ("WARNING", "rollout left unscored"),
        ("INFO", "rollout failed by the agent, scored 0.0"),
    ]
    assert "the reset didn't finish within 8s" in told[0][1] and "the env died during die" in told[1][1]


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(BUNDLES / "shellfix", max_concurrent_envs=2)


def solution(task_id: str) -> dict[str, str]:
    return json.loads((BUNDLES / "shellfix" / "solutions" / f"{task_id}.json").read_text())


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "left"])
def test_shellfix_a_filled_folder_and_leftover_processes_still_get_the_verdict(shellfix, fixed):
    with Bundle(shellfix.url, split="all") as env:
        environment = env.factory()
        environment.reset(task_id="shellfix-median")
        if fixed:
            environment.replace_in_file(**solution("shellfix-median"))
        environment.bash(
            command="for i in $(seq 20); do setsid sleep 3600 & done; "
            "head -c 40000000 /dev/zero > filler.bin; echo filled"
        )
        assert environment.get_reward() == (1.0 if fixed else 0.0)


def test_the_docs_list_every_ending():
    from corral.server.episodes.endings import ENDINGS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "bundle-format.md").read_text()
    missing = [cause for cause in ENDINGS if f"`{cause}`" not in doc]
    assert missing == [], f"docs/bundle-format.md does not describe: {missing}"


HUNG_CLOSE_S = 300.0  # a close that does not end, as far as any deadline here is concerned
ANSWER_WAIT_S = 120.0  # far beyond the 8 s reset deadline a bounded close gives up at, far below the hang


@pytest.mark.parametrize("fails", ["hangs", "raises"])
@pytest.mark.parametrize("dies", [True, False], ids=["an early end (the env dies)", "a scored end"])
def test_a_sandbox_whose_close_hangs_or_raises_does_not_hold_the_episodes_end(
    serve, tmp_path, monkeypatch, dies, fails
):
    """The episode's own sandbox closes (every process gone), then hangs, as a close on a stuck
    engine would, or raises, as one on files the agent left could: the episode still ends, with
    the outcome it had, long before the hang ends. (The untouched replay an early end plays
    closes normally.)"""
    closing = LocalSandbox.close
    closes: list[LocalSandbox] | None

    async def fails_the_first_time(sandbox: LocalSandbox) -> None:
        await closing(sandbox)
        if closes is not None:  # once the server has started (it closes a sandbox of its own)
            closes.append(sandbox)
            if len(closes) == 1 and fails == "raises":
                raise RecursionError("maximum recursion depth exceeded")
            if len(closes) == 1:
                await asyncio.sleep(HUNG_CLOSE_S)

    monkeypatch.setattr(LocalSandbox, "close", fails_the_first_time)
    closes = None
    server = serve(write_probe_bundle(tmp_path), max_concurrent_envs=2, reset_timeout_s=8)
    closes = []
    with ws(server) as socket:
        opened(socket, task_id="plain")
        if dies:
            last = call("die", how="exit")
        else:
            called(socket, "say", word="apple")
            last = call("end_turn", response="done")
        ended = observed(send(socket, last, timeout_s=ANSWER_WAIT_S), CallToolObservation)

    assert closes, "the sandbox was never closed"
    assert (ended.done, ended.status, ended.reward) == ((True, "failed", 0.0) if dies else (True, "scored", 1.0)), ended
