"""A stand-in for a vLLM server's token-in `/v1/completions`, backed by a local HF model.

vLLM cannot be installed on the CPU machines, so the tests check `VLLMGenerator` against this:
the same request fields (`prompt` as token ids, `max_tokens`, `temperature`, `top_p`, `top_k`,
`stop_token_ids`, `return_token_ids`, `logprobs`, `seed`) and the same response shape
(`choices[0].token_ids`, `.prompt_token_ids`, `.logprobs.token_logprobs`, `.finish_reason`), and
`GET /v1/models` listing the served name. With a `policy` (the decoded prompt -> the text to
answer) it is a scripted model instead, which vLLM-like gives no logprobs (null each).
It serves on a free loopback port from a thread; it says nothing about real vLLM's numerics.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from corral.training.generation import Sample, SamplingParams, TransformersGenerator


class CompletionRequest(BaseModel):
    model: str
    prompt: list[int]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1
    stop_token_ids: list[int] = []
    return_token_ids: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True
    seed: int | None = None


Policy = Callable[[str], str]


def scripted(tokenizer: Any, policy: Policy, prompt: list[int], stop: list[int]) -> Sample:
    ids = tokenizer.encode(policy(tokenizer.decode(prompt)), add_special_tokens=False) + stop[:1]
    return Sample(token_ids=ids, logprobs=[None] * len(ids), stopped=True)  # type: ignore[list-item]


def app(model: Any, tokenizer: Any, served_name: str, policy: Policy | None = None) -> FastAPI:
    api = FastAPI()
    lock = threading.Lock()

    @api.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vllm"}]}

    @api.post("/v1/completions")
    def completions(request: CompletionRequest) -> dict[str, Any]:
        if request.model != served_name:
            raise HTTPException(404, f"The model `{request.model}` does not exist.")
        if request.n != 1:
            raise HTTPException(400, "the stand-in serves n=1 only")
        sampling = SamplingParams(request.temperature, request.top_p, max(request.top_k, 0))
        stop = request.stop_token_ids or [tokenizer.eos_token_id]
        with lock:  # the seed and the sampling happen together
            if request.seed is not None:
                torch.manual_seed(request.seed % 2**63)
            if policy is not None:
                sample = scripted(tokenizer, policy, request.prompt, stop)
            else:
                sample = TransformersGenerator(model, sampling).generate(
                    request.prompt, max_new_tokens=request.max_tokens, stop_token_ids=stop)
        choice: dict[str, Any] = {
            "index": 0,
            "text": tokenizer.decode(sample.token_ids, skip_special_tokens=request.skip_special_tokens),
            "finish_reason": "stop" if sample.stopped else "length",
            "logprobs": None,
        }
        if request.logprobs is not None:
            choice["logprobs"] = {
                "tokens": tokenizer.convert_ids_to_tokens(sample.token_ids),
                "token_logprobs": sample.logprobs,
                "top_logprobs": None,
                "text_offset": [],
            }
        if request.return_token_ids:
            choice["token_ids"] = sample.token_ids
            choice["prompt_token_ids"] = request.prompt
        return {
            "id": "cmpl-standin", "object": "text_completion", "created": int(time.time()),
            "model": served_name, "choices": [choice],
            "usage": {"prompt_tokens": len(request.prompt), "completion_tokens": len(sample.token_ids),
                      "total_tokens": len(request.prompt) + len(sample.token_ids)},
        }

    return api


@contextmanager
def serve_standin(model: Any, tokenizer: Any, served_name: str = "tiny", policy: Policy | None = None) -> Iterator[str]:
    """Serve the stand-in on a free loopback port (a scripted model with `policy`); yields its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # bound here and handed over: no race for the port
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(model, tokenizer, served_name, policy), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name="vllm-standin", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the vLLM stand-in did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
