"""Generators: token ids in, sampled token ids and their logprobs out.

`TransformersGenerator` samples with HF `generate`, one request at a time (a vLLM stand-in, a
notebook); `corral.training.batching.BatchedGenerator` samples for many episodes in one padded
`generate` (the trainer's own model); `VLLMGenerator` asks a vLLM server's token-in
`/v1/completions` (`prompt` as token ids, `return_token_ids`, `logprobs=0`), the request TRL's
AsyncGRPO sends. None decodes or re-tokenizes anything: what they return is exactly what was
sampled. A logprob that was not computed, or that the server did not give, is NaN (as TRL reads
vLLM's missing ones).
"""

from __future__ import annotations

import math
import random
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import torch

from corral.errors import GenerationError, ServerUnreachable


@dataclass(frozen=True)
class Sample:
    """One sampled continuation: its ids, each id's logprob, and whether it ended on a stop id
    (False: it ran into `max_new_tokens`)."""

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool


class Generator(Protocol):
    """Samples one continuation of a prompt given as token ids. Called from several threads."""

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        """Sample until a stop id (kept as the last id) or `max_new_tokens` ids."""
        ...


def playing(generator: Generator, episodes: int, concurrency: int) -> AbstractContextManager[object]:
    """The block in which `episodes` episodes sample from `generator`, `concurrency` at a time: a
    batching generator waits for the ones in play before it generates (see
    `BatchedGenerator.playing`); any other generator needs no notice."""
    start = getattr(generator, "playing", None)
    return start(episodes, concurrency) if start is not None else nullcontext()


def episode_on(generator: Generator) -> AbstractContextManager[object]:
    """One episode's turn on `generator`, inside `playing` (see `BatchedGenerator.episode`)."""
    start = getattr(generator, "episode", None)
    return start() if start is not None else nullcontext()


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end the model's turn, as TRL's trainer reads them: the tokenizer's EOS and every
    id of the model's `generation_config.eos_token_id` (Qwen3: `<|im_end|>` and `<|endoftext|>`),
    on each of which vLLM stops whatever a request's `stop_token_ids` say.

    `model`: a model in memory, or the folder or Hub name its `generation_config.json` is read
    from (a model without one ends on the tokenizer's EOS alone, in vLLM too)."""
    if isinstance(model, str | Path):
        from transformers import GenerationConfig

        try:
            config = GenerationConfig.from_pretrained(str(model))
        except OSError:
            config = None
    else:
        config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids = [tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])]
    return list(dict.fromkeys(i for i in ids if i is not None))


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: the trainer's `temperature`, `top_p` and `top_k` (0: no top-k). The trainer's
    `min_p` and `repetition_penalty` are not applied."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def from_trainer_args(cls, args: Any) -> SamplingParams:
        return cls(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0)


class TransformersGenerator:
    """HF `generate` on an in-process model, one request at a time (concurrent callers take
    turns); logprobs are log-softmax of the logits over the temperature (the distribution
    sampled from before top-k/top-p), one per sampled id. For many episodes at once, use
    `BatchedGenerator`, which serves them in one padded call.
    """

    def __init__(self, model: Any, sampling: SamplingParams = SamplingParams()):
        self.model = model
        self.sampling = sampling
        self._lock = threading.Lock()

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([prompt_ids], device=device)
        with self._lock, torch.no_grad():
            output = self.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                top_k=self.sampling.top_k,
                max_new_tokens=max_new_tokens,
                eos_token_id=stop_token_ids,
                pad_token_id=stop_token_ids[0],
                output_logits=True,
                return_dict_in_generate=True,
            )
        ids = output.sequences[0, len(prompt_ids) :].tolist()
        # generate pads finished rows; a single row stops at its first stop id.
        stop = next((i for i, token in enumerate(ids) if token in stop_token_ids), None)
        ids = ids if stop is None else ids[: stop + 1]
        logprobs = [
            torch.log_softmax(logits[0].float() / self.sampling.temperature, dim=-1)[token].item()
            for logits, token in zip(output.logits, ids, strict=False)
        ]
        return Sample(token_ids=ids, logprobs=logprobs, stopped=stop is not None)


_SERVER_IDLE_CLOSE_S = 5.0
"""vLLM's server (uvicorn's `timeout_keep_alive`) closes a connection idle this long."""
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""What httpx raises when the server closed the connection under a request, before its answer."""


class VLLMGenerator:
    """A vLLM server's OpenAI-compatible `/v1/completions`, token-in and token-out.

    Sends `prompt` as token ids with `return_token_ids: true` and `logprobs: 0`, and reads
    `choices[0].token_ids` and `choices[0].logprobs.token_logprobs` (vLLM 0.10.2 and later).

    Args:
        base_url: The server, e.g. `http://gpu-box:8000`.
        model: The served model's name; by default the one the server lists at `/v1/models`, as
            TRL reads it (the trainer's model path is not it: `trl vllm-serve --model out/sft`
            may serve under another name).
        sampling: Temperature, top-p and top-k.
        timeout: Seconds one request may take.
        tokenizer: Only to evaluate through an OpenAI-compatible server that answers without
            token ids: its text is encoded with this tokenizer, which is NOT token-exact (never
            train on such samples), and its logprobs are NaN.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        sampling: SamplingParams = SamplingParams(),
        timeout: float = 600.0,
        tokenizer: Any = None,
    ):
        self.base_url = base_url.rstrip("/")
        self._model = model
        self.sampling = sampling
        self.tokenizer = tokenizer
        # A pooled connection is dropped well before the server closes it: one reused as the server
        # closes it loses its request ("Server disconnected without sending a response").
        limits = httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=_SERVER_IDLE_CLOSE_S / 2
        )
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, trust_env=False, limits=limits)

    @property
    def model(self) -> str:
        """The served model's name: the one given, else the first the server lists."""
        if self._model is None:
            reply = self._send("GET", "/v1/models")
            served = reply.json().get("data") if reply.status_code == 200 else None
            if not served:
                raise GenerationError(
                    f"the server at {self.base_url} lists no model at /v1/models "
                    f"({reply.status_code}): pass VLLMGenerator(url, model=NAME)"
                )
            self._model = str(served[0]["id"])
        return self._model

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        payload = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "top_k": self.sampling.top_k if self.sampling.top_k > 0 else -1,  # vLLM: -1 (or 0) disables top-k
            "n": 1,
            "stop_token_ids": stop_token_ids,
            "return_token_ids": True,
            "logprobs": 0,  # the sampled token's logprob only
            "skip_special_tokens": False,
            "seed": random.getrandbits(63),  # independent samples across data-parallel engines, as TRL does
        }
        reply = self._send("POST", "/v1/completions", json=payload)
        if reply.status_code != 200:
            raise GenerationError(
                f"the vLLM server at {self.base_url} refused a completion ({reply.status_code}): {reply.text[:500]}"
            )
        choice = reply.json()["choices"][0]
        stopped = choice.get("finish_reason") == "stop"
        ids = choice.get("token_ids")
        if ids is None:
            return self._from_text(choice, stopped, stop_token_ids)
        # vLLM gives None where it could not score a token; TRL reads that as NaN, and so does corral.
        logprobs = [math.nan if lp is None else lp for lp in (choice.get("logprobs") or {}).get("token_logprobs", [])]
        return Sample(token_ids=ids, logprobs=logprobs or [math.nan] * len(ids), stopped=stopped)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, sent again once on a fresh connection when the server closed the first under it
        (the same request: a completion carries its seed, so it samples the same ids)."""
        try:
            try:
                return self._http.request(method, path, **kwargs)
            except _DROPPED:
                return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ServerUnreachable(f"could not reach the vLLM server at {self.base_url}: {error}") from None

    def _from_text(self, choice: dict[str, Any], stopped: bool, stop_token_ids: list[int]) -> Sample:
        """A server that answers with text only: encoded again, for evaluation (see `tokenizer`)."""
        if self.tokenizer is None:
            raise GenerationError(
                f"the server at {self.base_url} returned no token ids: token-exact rollouts need vLLM 0.10.2 or "
                "later, which answers return_token_ids (to evaluate through another OpenAI-compatible server, "
                "pass VLLMGenerator(..., tokenizer=...))"
            )
        ids = self.tokenizer.encode(choice.get("text") or "", add_special_tokens=False)
        if stopped and (not ids or ids[-1] not in stop_token_ids):
            ids.append(stop_token_ids[0])  # such servers leave the stop token out of the text
        return Sample(token_ids=ids, logprobs=[math.nan] * len(ids), stopped=stopped)

    def close(self) -> None:
        self._http.close()
