"""The capture proxy on loopback between the real OpenAI SDK (a scripted agent) and a stand-in
for vLLM 0.32: what the engine is asked, what the agent gets, what is captured, and that
OpenEnv 0.10's `TrainingTrace` and TRL 1.16's trace-to-rows accept the capture."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from corral.errors import CaptureNotTrainable
from corral.protocol.harness.capture import HarnessCapture, training_trace
from corral.server.harness import capture as harness_capture
from corral.server.harness.capture import CaptureProxy, EpisodeCapture, HttpUpstream, create_capture_app
from tests.harness_engine import MODEL, StandInEngine, assert_paths_are_what_was_sampled, serving

SYSTEM = {"role": "system", "content": "you fix shell scripts"}
TASK = {"role": "user", "content": "fix run.sh"}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
STEP_LIMIT = 5


class Proxy:
    """A stand-in engine and the capture proxy in front of it, both served on loopback."""

    def __init__(self, engine: StandInEngine, engine_url: str, proxy: CaptureProxy, url: str) -> None:
        self.engine, self.engine_url, self.proxy, self.url = engine, engine_url, proxy, url

    def open(self, episode_id: str = "episode-1", max_calls: int = STEP_LIMIT) -> EpisodeCapture:
        upstream = HttpUpstream(self.engine_url, model=MODEL)
        return self.proxy.open_episode(
            upstream, episode_id=episode_id, temperature=0.7, max_calls=max_calls, max_tokens=4096
        )

    def agent(self, episode: EpisodeCapture, key: str | None = None) -> openai.OpenAI:
        """An SDK client on `episode`'s route, with its key unless another is given."""
        base_url = f"{self.url}/episodes/{episode.episode_id}/v1"
        return openai.OpenAI(base_url=base_url, api_key=key or episode.key, max_retries=2)

    def close(self, episode: EpisodeCapture) -> HarnessCapture:
        return self.proxy.close_episode(episode.episode_id)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    engine, capture_proxy = StandInEngine(), CaptureProxy()
    with serving(engine.app()) as engine_url, serving(create_capture_app(capture_proxy)) as url:
        yield Proxy(engine, engine_url, capture_proxy, url)


def tool_turn(message: Any) -> list[dict[str, Any]]:
    """The assistant's message (the SDK's object) and its tool's result, as the next prompt holds them."""
    calls = [{"id": c.id, "type": "function", "function": c.function.model_dump()} for c in message.tool_calls]
    result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "ok"}
    return [{"role": "assistant", "content": message.content, "tool_calls": calls}, result]


def streamed_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One streamed call, its chunks put back together as an agent does."""
    content, calls = "", {}
    stream = client.chat.completions.create(
        model="agent-model", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                calls[call.index] = {"id": call.id, "type": "function", "function": call.function.model_dump()}
    assert calls, "the streamed reply carried no tool call"
    assistant = {"role": "assistant", "content": content or None, "tool_calls": list(calls.values())}
    return [assistant, {"role": "tool", "tool_call_id": calls[0]["id"], "content": "ok"}]


def scripted_agent(client: openai.OpenAI, engine: StandInEngine) -> str:
    """Three turns (the second retried by the SDK after a 500, the third streamed), a title
    side call, a compaction that starts over, and one call past the step limit."""
    ask = client.chat.completions.create
    messages = [SYSTEM, TASK]
    first = ask(model="agent-model", messages=messages, tools=TOOLS, temperature=0.2, top_p=0.5, max_tokens=100000)
    messages += tool_turn(first.choices[0].message)
    ask(model="agent-model", messages=[{"role": "user", "content": "a title for: fix run.sh"}])
    engine.fail_next = 1
    messages += tool_turn(ask(model="agent-model", messages=messages, tools=TOOLS).choices[0].message)
    messages += streamed_turn(client, messages)
    compacted = [SYSTEM, {"role": "user", "content": "so far: three commands ran; fix run.sh"}]
    ask(model="agent-model", messages=compacted, tools=TOOLS)
    past = ask(model="agent-model", messages=compacted, tools=TOOLS)
    return past.choices[0].message.content or ""


def test_a_scripted_sdk_agent_is_captured_token_exact(proxy: Proxy):
    episode = proxy.open()
    stopped_with = scripted_agent(proxy.agent(episode), proxy.engine)
    capture = proxy.close(episode)

    assert stopped_with == "Step budget exhausted; stopping."
    assert capture.summary().model_dump() == {
        "level": "tokens",
        "calls": 5,
        "roots": 2,
        "paths": 2,
        "retries": 0,
        "side_calls": 1,
        "budget_stops": 1,
    }
    assert capture.problems == []
    # What the engine saw: never a stream, the training policy's sampling, ids asked for, the
    # served model's name, the output cap (the agent asked for more).
    for body in proxy.engine.bodies:
        assert body["stream"] is False and "stream_options" not in body
        assert {key: body[key] for key in ("temperature", "top_p", "top_k", "min_p")} == {
            "temperature": 0.7,
            "top_p": 1.0,
            "top_k": -1,
            "min_p": 0.0,
        }
        assert body["return_token_ids"] is True and body["logprobs"] is True and body["top_logprobs"] == 0
        assert body["model"] == MODEL
    assert proxy.engine.bodies[0]["max_tokens"] == 4096
    assert capture.calls[0].requested_sampling == {"temperature": 0.2, "top_p": 0.5, "max_tokens": 100000}
    assert [call.retry_count for call in capture.calls] == [0, 0, 1, 0, 0]  # the SDK said it retried
    assert len(proxy.engine.bodies) == 6  # five answered, one 500; the call past the limit never went
    for call, sampled in zip(capture.calls, proxy.engine.sampled, strict=True):
        assert call.prompt_token_ids == sampled.prompt_token_ids
        assert call.completion_token_ids == sampled.completion_token_ids
        assert call.per_token_logps == sampled.logprobs
    assert_paths_are_what_was_sampled(capture, proxy.engine.sampled)


@pytest.mark.trl
def test_openenv_and_trl_accept_the_captured_trace(proxy: Proxy):
    from openenv.core.harness.training import TrainingTrace
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    episode = proxy.open()
    scripted_agent(proxy.agent(episode), proxy.engine)
    capture = proxy.close(episode)
    trace = TrainingTrace.model_validate(training_trace(capture))
    # lossless_capture: TRL forks on any drift (threshold 0); one row per root-to-leaf path.
    rows, tally = _chain_to_sequences(_turns_from_training_trace(trace), "rollout", 0)
    graph = capture.graph()
    assert len(rows) == len(graph.paths) == 2
    assert tally["clean"] == 2 and tally["fork"] == 1
    for row, path in zip(rows, graph.paths, strict=True):
        ids, mask, logps = graph.sequence(path)
        assert (row.input_ids, row.completion_mask, row.old_log_probs) == (ids, mask, logps)


def test_only_the_episodes_own_key_reaches_the_engine(proxy: Proxy):
    mine, other = proxy.open("mine"), proxy.open("other")
    url = f"{proxy.url}/episodes/mine/v1/chat/completions"
    no_key = httpx.post(url, json={"model": "m", "messages": [TASK]}, trust_env=False)
    assert no_key.status_code == 401
    for key in (other.key, mine.key[:-1], "not-a-key"):  # another episode's key on mine's route
        with pytest.raises(openai.AuthenticationError):
            proxy.agent(mine, key).chat.completions.create(model="m", messages=[TASK])
    proxy.agent(other).chat.completions.create(model="m", messages=[TASK])
    assert len(proxy.close(other).calls) == 1
    with pytest.raises(openai.AuthenticationError):  # a closed episode's key opens nothing
        proxy.agent(other).chat.completions.create(model="m", messages=[TASK])
    assert proxy.close(mine).calls == []
    assert len(proxy.engine.bodies) == 1


@pytest.mark.parametrize(("logprobs", "level"), [(True, "logprobs"), (False, "text")])
def test_an_engine_without_ids_lowers_the_capture_loudly(
    proxy: Proxy, caplog: pytest.LogCaptureFixture, logprobs: bool, level: str
):
    proxy.engine.return_ids, proxy.engine.return_logprobs = False, logprobs
    episode = proxy.open()
    with caplog.at_level(logging.WARNING, logger="corral.server"):
        reply = proxy.agent(episode).chat.completions.create(model="m", messages=[TASK], tools=TOOLS)
    assert reply.choices[0].message.tool_calls  # the agent is answered as ever
    capture: HarnessCapture = proxy.close(episode)
    assert capture.level == level
    assert any("prompt_token_ids" in problem for problem in capture.problems)
    assert f"episode episode-1 is at level {level!r}" in caplog.text and "prompt_token_ids" in caplog.text
    with pytest.raises(CaptureNotTrainable):
        training_trace(capture)


def test_an_engine_reply_unlike_vllms_is_answered_and_marked_not_recorded(proxy: Proxy):
    def garble(reply: dict[str, Any]) -> dict[str, Any]:
        reply["choices"][0]["logprobs"] = "garbled"
        return reply

    proxy.engine.mangle = garble
    episode = proxy.open(max_calls=2)
    for _ in range(2):
        reply = proxy.agent(episode).chat.completions.create(model="m", messages=[TASK])
        assert reply.choices[0].message.content == "answer to 1 messages"
    past = proxy.agent(episode).chat.completions.create(model="m", messages=[TASK])
    assert past.choices[0].message.content == "Step budget exhausted; stopping."  # the two still counted
    capture = proxy.close(episode)
    assert (capture.level, capture.calls) == ("text", [])
    assert capture.problems == [
        "the engine's reply could not be read (AttributeError(\"'str' object has no attribute 'get'\"))"
    ]


def test_constrained_decoding_and_several_choices_are_refused(proxy: Proxy):
    client = proxy.agent(proxy.open())
    with pytest.raises(openai.BadRequestError, match="constrained decoding"):
        client.chat.completions.create(model="m", messages=[TASK], logit_bias={"42": 5})
    with pytest.raises(openai.BadRequestError, match="n=2"):
        client.chat.completions.create(model="m", messages=[TASK], n=2)
    assert proxy.engine.bodies == []


def test_a_call_past_the_limit_streams_the_stop_message_and_is_not_recorded(proxy: Proxy):
    episode = proxy.open(max_calls=1)
    client = proxy.agent(episode)
    client.chat.completions.create(model="m", messages=[TASK])
    stream = client.chat.completions.create(model="m", messages=[TASK], stream=True)
    text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    assert text == "Step budget exhausted; stopping."
    capture = proxy.close(episode)
    assert (len(capture.calls), capture.budget_stops, len(proxy.engine.bodies)) == (1, 1, 1)
    assert json.dumps(capture.model_dump()).count("Step budget exhausted") == 0


def test_a_streaming_agent_waiting_on_a_slow_engine_gets_keepalives_then_its_answer(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(harness_capture, "KEEPALIVE_S", 0.05)
    proxy.engine.delay_s = 0.5
    episode = proxy.open()
    body = {"model": "m", "messages": [TASK], "stream": True}
    headers = {"Authorization": f"Bearer {episode.key}"}
    url = f"{proxy.url}/episodes/{episode.episode_id}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, trust_env=False) as raw:
        lines = [line for line in raw.iter_lines() if line]
    assert lines[0] == ": corral keepalive" and lines[-1] == "data: [DONE]"
    stream = proxy.agent(episode).chat.completions.create(model="m", messages=[TASK], stream=True)
    assert "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices) == "answer to 1 messages"
    assert len(proxy.close(episode).calls) == 2
