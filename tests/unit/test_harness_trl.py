"""An episode with every shape an agent makes (a chain, a title side call, a retry, two parallel
branches, a sub-agent, a compaction) as a training trace: OpenEnv 0.10's own `TrainingTrace`
validates it, and TRL 1.16's own trace-to-rows (under `lossless_capture`, forking on any
drift) makes one row per root-to-leaf path, with every sampled token trained exactly once."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from corral.protocol.harness.capture import training_trace
from tests.harness_engine import StandInEngine
from tests.harness_episodes import SYSTEM, Episode, chain, tool_result

pytestmark = pytest.mark.trl  # imports TRL and OpenEnv, about 10 s: out of the fast tier


def every_shape() -> Episode:
    answers = itertools.count()

    def reply(body: dict[str, Any]) -> dict[str, Any]:  # a new answer on every call, as sampling gives
        count = next(answers)
        if not body.get("tools"):
            return {"role": "assistant", "content": f"a title {count}"}
        arguments = f'{{"command": "echo {count}"}}'
        call = {"id": f"call_{count}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    episode = Episode(StandInEngine(reply=reply))
    task = [SYSTEM, {"role": "user", "content": "fix run.sh"}]
    messages = chain(episode, task, turns=2)  # c0 c1
    episode.call([{"role": "user", "content": "a title for: fix run.sh"}], tools=None)  # c2
    episode.call(messages)  # c3: re-sent, and its answer dropped
    retried = episode.call(messages)  # c4
    messages = [*messages, retried, tool_result(retried)]
    branching = episode.call(messages)  # c5, which two branches continue at once
    for branch in ("a", "b"):  # c6 c7
        episode.call([*messages, branching, {"role": "tool", "tool_call_id": "x", "content": f"branch {branch}"}])
    chain(episode, [{"role": "system", "content": "you search files"}, {"role": "user", "content": "find"}], 1)  # c8
    chain(episode, [SYSTEM, {"role": "user", "content": "so far: five commands; fix run.sh"}], 1)  # c9
    return episode


def test_openenv_validates_and_trl_rows_train_each_sampled_token_once():
    from openenv.core.harness.training import TrainingTrace
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    episode = every_shape()
    capture = episode.capture()
    graph = capture.graph()
    assert graph.paths == [["c0", "c1", "c4", "c5", "c6"], ["c0", "c1", "c4", "c5", "c7"], ["c8"], ["c9"]]
    assert (graph.retries, graph.side_calls) == (["c3"], ["c2"])

    trace = TrainingTrace.model_validate(training_trace(capture))
    rows, tally = _chain_to_sequences(_turns_from_training_trace(trace), "rollout", 0)
    assert len(rows) == len(graph.paths)
    assert (tally["clean"], tally["fork"], tally["realign"]) == (4, 3, 0)
    sampled = {call.node_id: episode.engine.sampled[index] for index, call in enumerate(capture.calls)}
    trained = [node.node_id for node in graph.training_order()]
    assert [token for row in rows for token, bit in zip(row.input_ids, row.completion_mask) if bit] == [
        token for node in trained for token in sampled[node].completion_token_ids
    ]
    assert [value for row in rows for value, bit in zip(row.old_log_probs, row.completion_mask) if bit] == [
        value for node in trained for value in sampled[node].logprobs
    ]
    for row, path in zip(rows, graph.paths, strict=True):  # each row ends where its path's last call did
        leaf = sampled[path[-1]]
        assert row.input_ids == leaf.prompt_token_ids + leaf.completion_token_ids
