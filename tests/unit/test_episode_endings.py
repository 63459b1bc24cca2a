"""How an episode ends, played in-process: no server, no sandbox provider, no verifier workers.

The episode (`ServedEpisode`) gets a fake runtime (`episode_runtime.EpisodeRuntime`) whose env
connections (`env_connection.EnvConnection`) call corral's own env runtime (`corral.env.runtime.
Server`) on a parrot env in this process, and whose verifier runs here too. What the tests
read is what a client and the server's records see: the observations, and the record the
episode hands its runtime when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.errors import VerifierError
from corral.server.bundles.format import Task
from tests.episode_fakes import FAILURE_SCORE, FakeRuntime, play, replays


def test_an_episode_ends_with_its_verifiers_reward_and_hands_its_record_over_once():
    runtime = FakeRuntime()
    opened, answered, ended = play(runtime, ("say", {"text": "polly"}), ("end_turn", {"response": "said it"}))
    assert not opened.done and [tool.name for tool in opened.offered_tools] == [
        "say",
        "crash",
        "hang",
        "refuse",
        "end_turn",
    ]
    assert answered.result == "polly" and not answered.done
    assert (ended.done, ended.status, ended.reward, ended.scores) == (True, "scored", 1.0, {"said": 1.0})
    [record] = runtime.ended
    assert (record.status, record.cause, record.reward, record.bundle, record.sandbox) == (
        "scored",
        "scored",
        1.0,
        "parrots",
        "in-process",
    )
    assert [call.tool for call in record.calls] == ["say", "end_turn"] and record.tool_calls == 1
    assert runtime.connections[0].closed


def test_the_episode_closes_its_sandbox_once_the_command_verifiers_are_done_before_the_python_ones_run():
    """Python verifiers may wait for a worker: the sandbox (a container, a uid) is given back first."""
    runtime = FakeRuntime()
    closed_when_scored = []

    def said_once_closed(task: dict, report: dict) -> float:
        closed_when_scored.append(runtime.connections[0].closed)
        return 1.0

    runtime.verify = said_once_closed
    *_, ended = play(runtime, ("say", {"text": "polly"}), ("end_turn", {"response": "said it"}))
    assert (ended.status, ended.reward, closed_when_scored) == ("scored", 1.0, [True])


def test_a_call_with_arguments_over_the_limit_is_refused_before_the_env_sees_it():
    runtime = FakeRuntime(max_argument_bytes=100)
    _, refused, ended = play(runtime, ("say", {"text": "polly" * 40}), ("end_turn", {"response": ""}))
    assert refused.error is not None and refused.error.error_type == "invalid_args" and not refused.done
    assert "more than the 100 this server takes" in refused.error.message
    assert runtime.connections[0].env.heard == []  # type: ignore[attr-defined]
    assert ended.reward == 0.5 and runtime.ended[0].tool_calls == 0  # the episode went on, unharmed


def test_a_long_answer_is_cut_in_the_middle_to_the_servers_limit():
    runtime = FakeRuntime(max_output_chars=200)
    text = "a" * 600 + "z" * 600
    _, answered = play(runtime, ("say", {"text": text}))
    assert answered.error is None and len(answered.result) <= 200
    assert answered.result.startswith("a") and answered.result.endswith("z")
    assert "characters cut: the answer was 1,200, the server keeps 200" in answered.result


def test_a_sandbox_that_cannot_start_ends_the_episode_unscored_as_the_platforms():
    runtime = FakeRuntime(start_fails="the image parrot:1 is gone")
    [opened] = play(runtime)
    assert (opened.done, opened.status, opened.reward) == (True, "unscored", None)
    assert "the image parrot:1 is gone" in opened.reason
    [record] = runtime.ended
    assert (record.status, record.cause) == ("unscored", "env_start_failed")


def test_an_env_that_dies_mid_turn_is_the_agents_doing_while_the_platform_answers():
    runtime = FakeRuntime()
    _, died = play(runtime, ("crash", {}))
    assert (died.done, died.status, died.reward) == (True, "failed", FAILURE_SCORE)
    assert died.error.error_type == "transport_error" and "crashing on purpose" in died.reason
    assert (runtime.ended[0].status, runtime.ended[0].cause) == ("failed", "env_died")


def test_an_env_that_dies_while_the_platform_fails_is_unscored_with_the_evidence():
    runtime = FakeRuntime(platform_fault="the Docker engine stopped answering")
    _, died = play(runtime, ("crash", {}))
    assert (died.done, died.status, died.reward) == (True, "unscored", None)
    assert died.reason.endswith("; and the Docker engine stopped answering")
    assert (runtime.ended[0].status, runtime.ended[0].cause) == ("unscored", "sandbox_failed")


def test_a_tool_past_its_deadline_ends_the_episode_as_the_agents():
    runtime = FakeRuntime()
    _, hung = play(runtime, ("hang", {}))
    assert (hung.status, hung.reward, hung.error.error_type) == ("failed", FAILURE_SCORE, "timeout")
    assert runtime.ended[0].cause == "tool_timeout" and runtime.connections[0].closed


def test_a_verifier_that_raises_on_what_the_agent_did_fails_the_episode_once_a_replay_scores():
    runtime = FakeRuntime()
    _, _, ended = play(runtime, ("say", {"text": "boom"}), ("end_turn", {"response": ""}))
    assert (ended.status, ended.reward) == ("failed", FAILURE_SCORE)
    assert "verifier said raised ValueError: the report holds a boom" in ended.reason
    assert "the same task played untouched in a fresh sandbox was scored" in ended.reason
    assert len(runtime.connections) == 2 and all(connection.closed for connection in runtime.connections)
    [record] = runtime.ended  # the untouched replay is evidence, not an episode of its own
    assert (record.status, record.cause) == ("failed", "scoring_failed")
    assert replays(runtime, "sound") == 1
    assert runtime.metrics.registry.get_sample_value("corral_episodes_started_total") == 1  # nor counted as one


def test_a_verifier_that_raises_on_every_report_leaves_the_episode_unscored():
    def broken(task: dict, report: dict) -> float:
        raise KeyError("score")  # on every report: the untouched replay's too

    runtime = FakeRuntime(verify=broken)
    _, _, ended = play(runtime, ("say", {"text": "polly"}), ("end_turn", {"response": ""}))
    assert (ended.status, ended.reward) == ("unscored", None)
    assert (
        "verifier said raised KeyError: 'score'" in ended.reason
        and "played untouched in a fresh sandbox failed too" in ended.reason
    )
    assert (runtime.ended[0].status, runtime.ended[0].cause) == ("unscored", "scoring_failed")
    assert replays(runtime, "broken") == 1


def test_a_verifier_error_raised_by_the_runtime_is_judged_like_one_raised_by_the_verifier():
    class Raising(FakeRuntime):
        async def score(
            self, task: Task, report: dict[str, Any], verifiers: Mapping[str, str], *, timeout_s: float
        ) -> dict[str, float]:
            raise VerifierError("the verifier's worker process died: EOFError()")

    runtime = Raising()
    _, ended = play(runtime, ("end_turn", {"response": ""}))
    assert (ended.status, ended.reward) == ("unscored", None)
    assert ended.reason.startswith("the episode could not be scored: the verifier's worker process died")
    assert runtime.ended[0].cause == "scoring_failed"


def test_the_episode_speaks_to_its_env_only_through_its_connection_and_closes_it_once():
    runtime = FakeRuntime()
    play(runtime, ("say", {"text": "polly"}), ("end_turn", {"response": "said it"}))
    [connection] = runtime.connections  # NoCommands fails any line sent on the sandbox's stream
    assert connection.calls == ["initialize", "corral/reset", "tools/call", "corral/end_turn", "corral/report", "close"]


def test_a_call_the_env_answers_with_an_error_is_the_agents_to_read_and_the_episode_goes_on():
    runtime = FakeRuntime()
    _, refused, ended = play(runtime, ("refuse", {}), ("end_turn", {"response": ""}))
    assert refused.error is not None and not refused.done
    assert (refused.error.error_type, refused.error.message) == (
        "execution_error",
        "tools/call failed in the env: the parrot refuses",
    )
    assert (ended.status, ended.reward) == ("scored", 0.5)


def test_an_env_whose_own_end_turn_raises_on_the_agents_reply_fails_the_episode_once_a_replay_scores():
    runtime = FakeRuntime()
    _, ended = play(runtime, ("end_turn", {"response": "boom"}))
    assert (ended.status, ended.reward) == ("failed", FAILURE_SCORE)
    assert ended.reason.startswith("the env's own code failed: corral/end_turn failed in the env")
    assert (
        "the parrot chokes on boom" in ended.reason
        and "was scored, so the failure came from what the agent did" in ended.reason
    )
    assert (runtime.ended[0].cause, replays(runtime, "sound")) == ("env_hook_failed", 1)


def test_verifiers_past_their_deadline_end_the_episode_with_a_timeout_judged_by_the_replay():
    class Slow(FakeRuntime):
        async def score(
            self, task: Task, report: dict[str, Any], verifiers: Mapping[str, str], *, timeout_s: float
        ) -> dict[str, float]:
            raise TimeoutError  # as the verifier pool raises it past timeout_s

    runtime = Slow()
    _, ended = play(runtime, ("end_turn", {"response": ""}))
    assert ended.error.error_type == "timeout" and ended.reason.startswith("the verifiers did not finish within 5s")
    assert (ended.status, runtime.ended[0].cause, replays(runtime, "broken")) == ("unscored", "verify_timeout", 1)


def test_a_replay_that_corral_fails_to_play_is_the_platforms_evidence_and_its_sandbox_is_closed():
    runtime = FakeRuntime(breaks_on_silence=True)
    _, _, ended = play(runtime, ("say", {"text": "boom"}), ("end_turn", {"response": "done"}))
    assert (ended.status, ended.reward) == ("unscored", None)
    assert ended.reason.endswith("failed too: corral failed playing it: RuntimeError: the parrot's connection broke")
    assert len(runtime.connections) == 2 and all(connection.closed for connection in runtime.connections)
