"""The token-prefix graph of a harness episode's calls, on the shapes agents make: a chain, a
compaction, a retry, a sub-agent, two parallel calls, a title side call. In every case each
training path's sampled ids are what the engine sampled, byte for byte."""

from __future__ import annotations

import itertools
import json
import zlib
from typing import Any

import pytest

from corral.errors import CaptureNotTrainable
from corral.protocol.harness.capture import HarnessCapture, training_trace
from tests.harness_engine import StandInEngine, assert_paths_are_what_was_sampled
from tests.harness_episodes import SYSTEM, Episode, chain, tool_result


def counts(capture: HarnessCapture) -> dict[str, int]:
    summary = capture.summary()
    return {"roots": summary.roots, "paths": summary.paths, "retries": summary.retries, "side": summary.side_calls}


def test_a_plain_chain_is_one_root_and_one_path():
    episode = Episode()
    chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=3)
    capture = episode.capture()
    assert counts(capture) == {"roots": 1, "paths": 1, "retries": 0, "side": 0}
    assert capture.graph().paths == [["c0", "c1", "c2"]]
    assert [capture.graph().parents[node] for node in ("c0", "c1", "c2")] == [None, "c0", "c1"]
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


def test_a_compacted_history_starts_a_new_root():
    episode = Episode()
    chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=2)
    compacted = [SYSTEM, {"role": "user", "content": "so far: ran two commands; fix run.sh"}]
    chain(episode, compacted, turns=2)
    capture = episode.capture()
    assert counts(capture) == {"roots": 2, "paths": 2, "retries": 0, "side": 0}
    assert capture.graph().paths == [["c0", "c1"], ["c2", "c3"]]
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


@pytest.mark.parametrize("continued", [0, 1])
def test_a_retried_call_is_a_sibling_left_out_of_the_paths(continued: int):
    """The agent asks twice for one turn (its read timed out, it re-sent) and goes on with one
    answer: the other attempt is the retry, whichever came first."""
    answers = itertools.count()

    def reply(body: dict[str, Any]) -> dict[str, Any]:  # a new answer on every call, as sampling gives
        return {"role": "assistant", "content": None, "tool_calls": [_bash(f"attempt {next(answers)}")]}

    episode = Episode(StandInEngine(reply=reply))
    messages = chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=1)
    attempts = [episode.call(messages), episode.call(messages)]
    chain(episode, [*messages, attempts[continued], tool_result(attempts[continued])], turns=1)
    capture = episode.capture()
    graph = capture.graph()
    kept, retried = ("c1", "c2") if continued == 0 else ("c2", "c1")
    assert graph.retries == [retried]
    assert graph.parents["c1"] == graph.parents["c2"] == "c0"
    assert graph.paths == [["c0", kept, "c3"]]
    assert counts(capture) == {"roots": 1, "paths": 1, "retries": 1, "side": 0}
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


def test_a_retry_nothing_continued_keeps_the_last_attempt():
    episode = Episode()
    messages = [SYSTEM, {"role": "user", "content": "fix run.sh"}]
    episode.call(messages)
    episode.call(messages)
    assert episode.capture().graph().retries == ["c0"]
    assert episode.capture().graph().paths == [["c1"]]


def test_a_sub_agent_is_a_root_of_its_own():
    episode = Episode()
    main = chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=1)
    chain(episode, [{"role": "system", "content": "you search files"}, {"role": "user", "content": "find run.sh"}], 2)
    chain(episode, main, turns=1)
    capture = episode.capture()
    assert counts(capture) == {"roots": 2, "paths": 2, "retries": 0, "side": 0}
    assert capture.graph().paths == [["c0", "c3"], ["c1", "c2"]]
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


def test_two_parallel_calls_from_one_history_are_two_paths_sharing_their_start():
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        calls = [_bash("ls"), _bash("cat run.sh")] if len(body["messages"]) == 2 else [_bash("true")]
        return {"role": "assistant", "content": None, "tool_calls": calls}

    episode = Episode(StandInEngine(reply=reply))
    first = episode.call([SYSTEM, {"role": "user", "content": "fix run.sh"}])
    history = [SYSTEM, {"role": "user", "content": "fix run.sh"}, first]
    episode.call([*history, tool_result(first, 0)])  # each tool's branch continues on its own
    episode.call([*history, tool_result(first, 1)])
    capture = episode.capture()
    graph = capture.graph()
    assert graph.paths == [["c0", "c1"], ["c0", "c2"]]
    assert [call.node_id for call in graph.training_order()] == ["c0", "c1", "c2"]
    assert counts(capture) == {"roots": 1, "paths": 2, "retries": 0, "side": 0}
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


def test_a_title_side_call_is_counted_and_not_trained():
    episode = Episode()
    messages = chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=1)
    episode.call([{"role": "user", "content": "a title for: fix run.sh"}], tools=None)
    chain(episode, messages, turns=1)
    capture = episode.capture()
    assert capture.graph().side_calls == ["c1"]
    assert counts(capture) == {"roots": 1, "paths": 1, "retries": 0, "side": 1}
    assert [turn["node_id"] for turn in training_trace(capture)["turns"]] == ["c0", "c2"]
    assert_paths_are_what_was_sampled(capture, episode.engine.sampled)


def test_the_training_trace_masks_sampled_ids_only_and_names_each_call_once():
    episode = Episode()
    chain(episode, [SYSTEM, {"role": "user", "content": "fix run.sh"}], turns=2)
    trace = training_trace(episode.capture())
    assert trace["schema_version"] == 1
    for turn, sample in zip(trace["turns"], episode.engine.sampled, strict=True):
        assert turn["prompt_token_ids"] == sample.prompt_token_ids
        assert turn["completion_token_ids"] == sample.completion_token_ids
        assert turn["per_token_logps"] == sample.logprobs
        assert turn["loss_mask"] == [0] * len(sample.prompt_token_ids) + [1] * len(sample.completion_token_ids)
    assert trace["turns"][1]["metadata"]["parent"] == "c0"


def test_a_capture_without_ids_has_no_training_trace():
    with pytest.raises(CaptureNotTrainable, match="level 'text'"):
        training_trace(HarnessCapture(level="text", problems=["the engine returned no prompt_token_ids"]))


def _bash(command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {
        "id": f"call_{zlib.crc32(command.encode())}",
        "type": "function",
        "function": {"name": "bash", "arguments": arguments},
    }
