"""A stand-in for a vLLM server's token-in `/v1/completions`, backed by a local HF model.

The tests of `VLLMGenerator` run against this (the real server is tests/vllm's tier): the same
request fields (`prompt` as token ids, `max_tokens`, `temperature`, `top_p`, `top_k`,
`stop_token_ids`, `return_token_ids`, `logprobs`, `seed`) and the same response shape
(`choices[0].token_ids`, `.prompt_token_ids`, `.logprobs.token_logprobs`, `.finish_reason`,
`.stop_reason`), and `GET /v1/models` listing the served name. It behaves as vLLM 0.32 does where
that has bitten corral:
- it stops on the tokenizer's EOS, on the ids asked for, and on every id of the model's
  `generation_config.eos_token_id` whatever `stop_token_ids` says (`stop_reason`: the stop id,
  None for the tokenizer's EOS);
- its logprobs are raw (log-softmax of the logits, before the temperature) unless it serves with
  `logprobs_mode="processed_logprobs"` (`--logprobs-mode processed_logprobs`);
- it closes a connection idle for `keep_alive_s` (vLLM's uvicorn: 5 s).
With a `policy` (the decoded prompt -> the text to answer) it is a scripted model instead, which
vLLM-like gives no logprobs (null each). It serves on a free loopback port from a thread; it says
nothing about real vLLM's numerics.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
import uvicorn
from fastapi import FastAPI, HTTPException, Request
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
LogprobsMode = Literal["raw_logprobs", "processed_logprobs"]


def scripted(tokenizer: Any, policy: Policy, prompt: list[int], stops: list[int], end_id: int) -> Sample:
    """The policy's answer, cut after its first stop id as vLLM would cut a sample; ended with
    `end_id` when it writes none."""
    ids = tokenizer.encode(policy(tokenizer.decode(prompt)), add_special_tokens=False)
    stop = next((i for i, token in enumerate(ids) if token in stops), None)
    ids = ids + [end_id] if stop is None else ids[: stop + 1]
    return Sample(token_ids=ids, logprobs=[None] * len(ids), stopped=True)  # type: ignore[list-item]


def raw_logprobs(model: Any, prompt: list[int], ids: list[int]) -> list[float]:
    """Each sampled id's log-probability before the temperature, as vLLM's default mode gives."""
    if not ids:
        return []
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()


def model_eos_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return [i for i in (eos if isinstance(eos, list) else [eos]) if i is not None] or [tokenizer.eos_token_id]


def app(
    model: Any,
    tokenizer: Any,
    served_name: str,
    policy: Policy | None = None,
    *,
    eos_token_ids: list[int],
    logprobs_mode: LogprobsMode = "raw_logprobs",
    peers: list[int] | None = None,
) -> FastAPI:
    api = FastAPI()
    lock = threading.Lock()

    @api.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vllm"}]}

    @api.post("/v1/completions")
    def completions(request: CompletionRequest, http: Request) -> dict[str, Any]:
        if peers is not None and http.client is not None:
            peers.append(http.client.port)
        if request.model != served_name:
            raise HTTPException(404, f"The model `{request.model}` does not exist.")
        if request.n != 1:
            raise HTTPException(400, "the stand-in serves n=1 only")
        sampling = SamplingParams(request.temperature, request.top_p, max(request.top_k, 0))
        stops = list(dict.fromkeys([tokenizer.eos_token_id, *request.stop_token_ids, *eos_token_ids]))
        with lock:  # the seed and the sampling happen together
            if request.seed is not None:
                torch.manual_seed(request.seed % 2**63)
            if policy is not None:
                sample = scripted(
                    tokenizer, policy, request.prompt, stops, (request.stop_token_ids or [tokenizer.eos_token_id])[0]
                )
            else:
                sample = TransformersGenerator(model, sampling).generate(
                    request.prompt, max_new_tokens=request.max_tokens, stop_token_ids=stops
                )
                if logprobs_mode == "raw_logprobs":
                    sample = Sample(
                        sample.token_ids, raw_logprobs(model, request.prompt, sample.token_ids), sample.stopped
                    )
        last = sample.token_ids[-1] if sample.stopped else None
        choice: dict[str, Any] = {
            "index": 0,
            "text": tokenizer.decode(sample.token_ids, skip_special_tokens=request.skip_special_tokens),
            "finish_reason": "stop" if sample.stopped else "length",
            "stop_reason": None if last == tokenizer.eos_token_id else last,
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
            "id": "cmpl-standin",
            "object": "text_completion",
            "created": int(time.time()),
            "model": served_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(request.prompt),
                "completion_tokens": len(sample.token_ids),
                "total_tokens": len(request.prompt) + len(sample.token_ids),
            },
        }

    return api


@contextmanager
def serve_standin(
    model: Any,
    tokenizer: Any,
    served_name: str = "tiny",
    policy: Policy | None = None,
    *,
    eos_token_ids: list[int] | None = None,
    logprobs_mode: LogprobsMode = "raw_logprobs",
    keep_alive_s: float = 5,
    peers: list[int] | None = None,
) -> Iterator[str]:
    """Serve the stand-in on a free loopback port (a scripted model with `policy`); yields its base URL.

    Args:
        eos_token_ids: The served model's `generation_config.eos_token_id`, on each of which it
            stops; by default `model`'s (the tokenizer's EOS for a scripted model).
        logprobs_mode: vLLM's `--logprobs-mode`: raw (its default) or processed (temperature applied).
        keep_alive_s: Seconds an idle connection stays open (uvicorn's `timeout_keep_alive`).
        peers: Collects the client's port of each completion request (a new port: a new connection).
    """
    eos_token_ids = model_eos_ids(model, tokenizer) if eos_token_ids is None else eos_token_ids
    api = app(
        model, tokenizer, served_name, policy, eos_token_ids=eos_token_ids, logprobs_mode=logprobs_mode, peers=peers
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # bound here and handed over: no race for the port
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning", timeout_keep_alive=keep_alive_s))
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
