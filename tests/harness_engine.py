"""A stand-in for vLLM 0.32's chat route, for the harness capture's tests and bench.

It answers `POST /v1/chat/completions` as vLLM 0.32 does when asked for ids and logprobs:
top-level `prompt_token_ids`, `choices[].token_ids`, `logprobs.content[]` (tokens as
`token_id:N` strings under `return_tokens_as_token_ids`), OpenAI `tool_calls`. Its tokenizer is
a word hash with a chat template whose assistant turn renders the same in the next prompt as
it was sampled, as real templates do, so a continued conversation's prompt extends the last
call's prompt+completion. It keeps every call it sampled, to compare a capture with, byte for
byte. `serving(app)` runs an app on a free loopback port with uvicorn, in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from corral.protocol.harness.capture import HarnessCapture

ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
END, TOOLS, CALL = 5, 6, 7
MODEL = "stand-in/tiny"


def word_ids(text: str) -> list[int]:
    return [100 + zlib.crc32(word.encode()) % 30000 for word in text.split()]


def render_message(message: dict[str, Any]) -> list[int]:
    ids = [ROLES[message["role"]], *word_ids(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        ids += [CALL, *word_ids(call["function"]["name"]), *word_ids(call["function"]["arguments"])]
    return [*ids, END]


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
    """The prompt's ids: the tools offered, every message, and the assistant turn's opening."""
    ids = [TOOLS, *word_ids(" ".join(tool["function"]["name"] for tool in tools)), END] if tools else []
    for message in messages:
        ids += render_message(message)
    return [*ids, ROLES["assistant"]]


def logprob(token_id: int, position: int) -> float:
    return -((token_id * 7 + position) % 97 + 1) / 100


def default_reply(request: dict[str, Any]) -> dict[str, Any]:
    """With tools offered, a `bash` call naming how long the conversation is; else a text."""
    count = len(request["messages"])
    if request.get("tools"):
        name = request["tools"][0]["function"]["name"]
        call = {"id": f"call_{count}", "type": "function", "function": {"name": name, "arguments": ""}}
        call["function"]["arguments"] = json.dumps({"command": f"echo step {count}"})
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"answer to {count} messages"}


@dataclass
class Sampled:
    """One call as the engine sampled it."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    body: dict[str, Any]


@dataclass
class StandInEngine:
    """The engine's state: what it sampled and was sent, and the faults the test asks for."""

    reply: Callable[[dict[str, Any]], dict[str, Any]] = default_reply
    return_ids: bool = True  # False: an engine that returns no ids (an old vLLM, a hosted API)
    return_logprobs: bool = True  # False: one that returns no logprobs either
    fail_next: int = 0  # answer this many calls with a 500 first
    delay_s: float = 0.0  # how long each answer takes
    mangle: Callable[[dict[str, Any]], dict[str, Any]] = lambda reply: reply  # a reply unlike vLLM's
    sampled: list[Sampled] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.bodies.append(body)
        if body.get("stream"):
            return 400, {"error": {"message": "stand-in: the capture proxy must never stream from the engine"}}
        if self.fail_next > 0:
            self.fail_next -= 1
            return 500, {"error": {"message": "stand-in: a failure the test asked for", "type": "InternalServerError"}}
        message = self.reply(body)
        prompt = render_prompt(body["messages"], body.get("tools"))
        completion = render_message(message)[1:]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if body.get("max_tokens") is not None and len(completion) > body["max_tokens"]:
            completion, finish = completion[: body["max_tokens"]], "length"
        logps = [logprob(token, position) for position, token in enumerate(completion)]
        self.sampled.append(Sampled(prompt, completion, logps, body))
        as_ids = body.get("return_tokens_as_token_ids", False)
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "stop_reason": None}
        if body.get("logprobs") and self.return_logprobs:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{token}" if as_ids else f"w{token}",
                        "logprob": value,
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for token, value in zip(completion, logps, strict=True)
                ]
            }
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.sampled)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
            "prompt_logprobs": None,
        }
        if self.return_ids and body.get("return_token_ids"):
            choice["token_ids"] = completion
            reply["prompt_token_ids"] = prompt
        return 200, reply

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            await asyncio.sleep(self.delay_s)
            status, reply = self.answer(body)
            return JSONResponse(self.mangle(reply), status_code=status)

        return app


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` served on a free loopback port by uvicorn in a thread; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)  # uvloop where installed, as `corral serve`
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the test server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def assert_paths_are_what_was_sampled(capture: HarnessCapture, sampled: list[Sampled]) -> None:
    """Each path's mask-1 ids are its calls' sampled ids, and its whole row the last call's
    prompt and completion, byte for byte, with the engine's logprobs under the sampled ids."""
    graph = capture.graph()
    by_node = {call.node_id: sample for call, sample in zip(capture.calls, sampled, strict=True)}
    for path in graph.paths:
        ids, mask, logps = graph.sequence(path)
        leaf = by_node[path[-1]]
        assert ids == leaf.prompt_token_ids + leaf.completion_token_ids
        assert [token for token, bit in zip(ids, mask, strict=True) if bit] == list(
            itertools.chain.from_iterable(by_node[node].completion_token_ids for node in path)
        )
        assert [value for value, bit in zip(logps, mask, strict=True) if bit] == list(
            itertools.chain.from_iterable(by_node[node].logprobs for node in path)
        )
