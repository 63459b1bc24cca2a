"""One padded `generate` for many episodes at once: how the trainer's own model samples.

Each episode plays in a thread of its own and asks for its next turn (`generate`), then waits.
A driver thread collects the requests and, once every episode in play is waiting (or
`window_s` after the first request, when some are still busy with the env), runs one
left-padded `generate` for all of them and hands each its sample. A GRPO step of 32 rollouts
of three turns is then a handful of batched calls instead of ~100 one-row ones.

Several processes (FSDP, DeepSpeed ZeRO-3) must make the same number of forward passes: FSDP
gathers each layer's parameters from every process at every forward, so a process that
generates once more than another waits forever. Episodes take different numbers of turns, so
under torch.distributed the drivers run in lockstep rounds: at each round the processes agree
(one all-reduce) whether any still has episodes in play; each then runs one `generate` (a
one-token dummy when it has no request) with `synced_gpus`, which keeps the decoding steps
inside it in step too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from corral.errors import ConfigError, GenerationError
from corral.training.generation import Sample, SamplingParams

LOGITS_PER_CHUNK = 1 << 27  # rows x positions x vocabulary per logprob forward: ~0.5 GB of float32


@dataclass(eq=False)  # by identity: a group's first turns are equal requests, each to be answered
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    stop_token_ids: tuple[int, ...]
    answered: threading.Event = field(default_factory=threading.Event)
    sample: Sample | None = None
    error: BaseException | None = None


class BatchedGenerator:
    """HF `generate` on an in-process model for many episodes at once, one padded call a round.

    Play episodes inside `playing(n)`, each inside `episode()`; `CorralRollout.play` does both.
    A `generate` outside `playing` is served alone.

    Args:
        model: The causal LM (the trainer's, unwrapped for generation).
        sampling: Temperature, top-p and top-k (by default 1, 1 and none).
        logprobs: Compute each sampled id's logprob (log-softmax of the logits over the
            temperature, the distribution before top-k/top-p), with one extra forward pass per
            round; without them the logprobs are NaN. TRL uses them only with vLLM's importance
            sampling correction or an off-policy mask, so the trainer's HF path skips them.
        pad_token_id: The id that pads the batch (the tokenizer's pad id).
        max_batch: The most requests in one call; more wait for the next round.
        window_s: How long a request waits for the episodes that are still busy with the env.
        lockstep: Run in lockstep rounds with the other processes; by default, when
            torch.distributed runs more than one process.
    """

    def __init__(
        self,
        model: Any,
        sampling: SamplingParams | None = None,
        *,
        logprobs: bool = True,
        pad_token_id: int | None = None,
        max_batch: int = 64,
        window_s: float = 0.05,
        lockstep: bool | None = None,
    ):
        self.model = model
        self.sampling = sampling or SamplingParams()
        self.logprobs = logprobs
        self.pad_token_id = pad_token_id
        self.max_batch = max_batch
        self.window_s = window_s
        self.lockstep = _distributed() if lockstep is None else lockstep
        # Positions past it are ones the model never learned: a sample stops there, cut.
        self.context_length: int | None = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.calls = 0  # padded generate calls made (dummy rounds included)
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._left = 0  # episodes of the playing() block that have not ended
        self._concurrency = 0  # how many of them play at once
        self._driver: threading.Thread | None = None
        self._failure: BaseException | None = None

    @contextmanager
    def playing(self, episodes: int, concurrency: int | None = None) -> Iterator[BatchedGenerator]:
        """The block in which `episodes` episodes sample, `concurrency` at a time (all by
        default); a driver thread serves them. Each episode plays inside `episode()`."""
        with self._cond:
            if self._driver is not None:
                raise ConfigError("a BatchedGenerator plays one batch of episodes at a time; make another for more")
            self._left, self._failure = episodes, None
            self._concurrency = concurrency or episodes
            self._driver = threading.Thread(target=self._drive, name="corral-generate", daemon=True)
        self._driver.start()
        try:
            yield self
        finally:
            with self._cond:
                self._left = 0  # episodes that raised never reached their end
                self._cond.notify_all()
            self._driver.join()
            self._driver = None

    @contextmanager
    def episode(self) -> Iterator[None]:
        """One episode, played to its end: until then the driver counts on its requests."""
        try:
            yield
        finally:
            with self._cond:
                self._left -= 1
                self._cond.notify_all()

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        """Sample up to `max_new_tokens` ids after `prompt_ids`, and no further than the model's
        context: a sample cut by either is not `stopped`."""
        if self.context_length is not None:
            max_new_tokens = min(max_new_tokens, self.context_length - len(prompt_ids))
            if max_new_tokens <= 0:
                return Sample(token_ids=[], logprobs=[], stopped=False)
        if self._driver is None:  # a lone request
            with self.playing(1), self.episode():
                return self.generate(prompt_ids, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids)
        request = _Request(list(prompt_ids), max_new_tokens, tuple(stop_token_ids))
        with self._cond:
            if self._failure is not None:
                raise GenerationError(f"generation failed earlier in this batch: {self._failure}")
            self._pending.append(request)
            self._cond.notify_all()
        request.answered.wait()
        if request.error is not None:
            raise GenerationError(f"generation failed: {request.error}") from request.error
        assert request.sample is not None
        return request.sample

    # The driver ---------------------------------------------------------------------------

    def _drive(self) -> None:
        batch: list[_Request] = []
        try:
            while True:
                batch, done = self._next_round()
                if self.lockstep:
                    if self._all_done(done):
                        return
                elif done:
                    return
                if batch or self.lockstep:
                    self._serve(batch)
        except BaseException as error:  # noqa: BLE001 - every waiting episode must hear of it
            with self._cond:
                self._failure = error
                for request in [*batch, *self._pending]:
                    request.error = error
                    request.answered.set()
                self._pending.clear()

    def _next_round(self) -> tuple[list[_Request], bool]:
        """The requests of the next round (one stop set, at most max_batch), and whether this
        process's episodes are all over."""
        with self._cond:
            began, first = time.monotonic(), None  # the round's clock, and when a request was first seen
            while True:
                over, now = self._left <= 0, time.monotonic()
                if self._pending:
                    first = first or now
                    in_play = min(self._left, self._concurrency)
                    if len(self._pending) >= in_play or over or now - first >= self.window_s:
                        break
                elif over or (self.lockstep and now - began >= self.window_s):  # a round of its own, in step
                    break
                self._cond.wait(timeout=self.window_s)
            stops = self._pending[0].stop_token_ids if self._pending else ()
            batch = [r for r in self._pending if r.stop_token_ids == stops][: self.max_batch]
            self._pending = [r for r in self._pending if r not in batch]
            return batch, over and not self._pending and not batch

    def _all_done(self, done: bool) -> bool:
        """Whether every process's episodes are over (one all-reduce, made by each process)."""
        flag = torch.tensor([0.0 if done else 1.0], device=_device(self.model))
        torch.distributed.all_reduce(flag)
        return flag.item() == 0

    def _serve(self, batch: list[_Request]) -> None:
        """One padded generate for `batch` (a dummy one-token generate for an empty batch)."""
        rows = [r.prompt_ids for r in batch] or [[self._pad(())]]
        stops = list(batch[0].stop_token_ids) if batch else [self._pad(())]
        pad = self._pad(stops)
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, ids in enumerate(rows):  # left-padded: every row's next token comes at the same place
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention[i, width - len(ids) :] = 1
        device = _device(self.model)
        input_ids, attention = input_ids.to(device), attention.to(device)
        sampling = self.sampling
        with torch.no_grad():
            output = self.model.generate(
                input_ids,
                attention_mask=attention,
                do_sample=sampling.temperature > 0,
                temperature=sampling.temperature or None,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                max_new_tokens=max((r.max_new_tokens for r in batch), default=1),
                eos_token_id=stops,
                pad_token_id=pad,
                synced_gpus=self.lockstep,
            )
        self.calls += 1
        samples = [_cut(row, request) for row, request in zip(output[:, width:].tolist(), batch, strict=False)]
        if self.logprobs:
            logprobs = self._logprobs(input_ids, attention, [s.token_ids for s in samples] or [[pad]], pad)
            samples = [Sample(s.token_ids, lps, s.stopped) for s, lps in zip(samples, logprobs, strict=False)]
        for request, sample in zip(batch, samples, strict=True):
            request.sample = sample
            request.answered.set()

    def _logprobs(
        self, input_ids: torch.Tensor, attention: torch.Tensor, completions: list[list[int]], pad: int
    ) -> list[list[float]]:
        """Each sampled id's logprob, from one forward over the padded prompts and samples."""
        width, longest = input_ids.shape[1], max(map(len, completions))
        ids = torch.full((len(completions), width + longest), pad, dtype=torch.long, device=input_ids.device)
        mask = torch.zeros_like(ids)
        ids[:, :width], mask[:, :width] = input_ids[: len(completions)], attention[: len(completions)]
        for i, completion in enumerate(completions):
            ids[i, width : width + len(completion)] = torch.tensor(completion)
            mask[i, width : width + len(completion)] = 1
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate numbers left-padded rows
        vocabulary = self.model.config.get_text_config().vocab_size
        chunk = max(1, LOGITS_PER_CHUNK // max(1, (longest + 1) * vocabulary))
        temperature = self.sampling.temperature or 1.0
        found: list[list[float]] = []
        with torch.no_grad():
            for start in range(0, len(completions), chunk):
                rows = slice(start, start + chunk)
                logits = self.model(
                    input_ids=ids[rows],
                    attention_mask=mask[rows],
                    position_ids=positions[rows],
                    logits_to_keep=longest + 1,
                ).logits[:, :-1]
                picked = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, ids[rows, width:, None])[
                    ..., 0
                ]
                found += [row[: len(c)] for row, c in zip(picked.tolist(), completions[rows], strict=True)]
        return found

    def _pad(self, stops: tuple[int, ...] | list[int]) -> int:
        if self.pad_token_id is not None:
            return self.pad_token_id
        if stops:
            return stops[0]
        raise ConfigError("BatchedGenerator needs pad_token_id (the tokenizer's pad id) to pad its batches")


def _cut(row: list[int], request: _Request) -> Sample:
    """A row of the batch as its request's sample: up to its first stop id, within its own budget."""
    row = row[: request.max_new_tokens]
    stop = next((i for i, token in enumerate(row) if token in request.stop_token_ids), None)
    ids = row if stop is None else row[: stop + 1]
    return Sample(token_ids=ids, logprobs=[math.nan] * len(ids), stopped=stop is not None)


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
