"""Harness episodes built call by call against the stand-in engine, captured as the proxy keeps
them, without a server: the graph's and the trace's tests build agents' shapes from these."""

from __future__ import annotations

import json
from typing import Any

from corral.protocol.harness.calls import CapturedCall
from corral.protocol.harness.capture import HarnessCapture
from tests.harness_engine import StandInEngine

SYSTEM = {"role": "system", "content": "you fix shell scripts"}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


class Episode:
    """Calls sampled by the stand-in engine and captured as the proxy keeps them."""

    def __init__(self, engine: StandInEngine | None = None) -> None:
        self.engine = engine or StandInEngine()
        self.calls: list[CapturedCall] = []

    def call(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = TOOLS) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "return_token_ids": True, "logprobs": True}
        if tools:
            body["tools"] = tools
        status, reply = self.engine.answer(body)
        assert status == 200
        choice = reply["choices"][0]
        self.calls.append(
            CapturedCall(
                node_id=f"c{len(self.calls)}",
                request={"messages": messages, **({"tools": tools} if tools else {})},
                sampling={"temperature": 1.0},
                requested_sampling={},
                level="tokens",
                prompt_token_ids=reply["prompt_token_ids"],
                completion_token_ids=choice["token_ids"],
                per_token_logps=[entry["logprob"] for entry in choice["logprobs"]["content"]],
                message=choice["message"],
                finish_reason=choice["finish_reason"],
            )
        )
        return choice["message"]

    def capture(self) -> HarnessCapture:
        return HarnessCapture(calls=self.calls)


def tool_result(message: dict[str, Any], index: int = 0) -> dict[str, Any]:
    call = message["tool_calls"][index]
    return {"role": "tool", "tool_call_id": call["id"], "content": f"ran {json.loads(call['function']['arguments'])}"}


def chain(episode: Episode, messages: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """`turns` calls, each continuing the last with its tool's result; the history after them."""
    for _ in range(turns):
        reply = episode.call(messages)
        messages = [*messages, reply, tool_result(reply)]
    return messages
