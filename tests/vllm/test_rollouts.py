"""`CorralRollout` through a real vLLM server's token-in `/v1/completions`: the ids vLLM sampled
are the episode's, as sampled, and their logprobs are the trainer's own forward pass's
(log-softmax of its logits over the temperature) at temperature 1 and at 0.7, which a server
giving raw logprobs (vLLM's default) would fail at 0.7."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from corral.client import Bundle
from corral.training.generation import Sample, SamplingParams, VLLMGenerator, eos_token_ids
from corral.training.processors import HermesProcessor
from corral.training.rollouts import CorralRollout, Rollout
from tests.conftest import BUNDLES

pytestmark = [pytest.mark.vllm, pytest.mark.trl, pytest.mark.timeout(900)]

TOLERANCE = 2e-3  # float32 on both sides; vLLM's CPU kernels sum in another order


class Recording:
    """The generator, keeping each sample it returned."""

    def __init__(self, generator: VLLMGenerator):
        self.generator, self.samples = generator, []

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        sample = self.generator.generate(prompt_ids, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids)
        self.samples.append(sample)
        return sample


@pytest.fixture(scope="module")
def gridsim() -> Iterator[Bundle]:
    with Bundle.local(BUNDLES / "gridsim", split="eval", sandbox="local", max_concurrent_envs=4) as bundle:
        yield bundle


def trainer_logprobs(model, rollout: Rollout, temperature: float) -> torch.Tensor:
    """The trainer's log-probabilities of the rollout's ids in their context, as GRPO computes them."""
    ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(rollout.prompt_ids) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(rollout.completion_ids)[:, None])[:, 0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollouts_through_vllm_keep_its_ids_with_the_trainers_logprobs(
    vllm_url: str, vllm_model_dir: Path, vllm_tokenizer, gridsim: Bundle, temperature: float
) -> None:
    processor = HermesProcessor.for_trainer(
        vllm_tokenizer, {"enable_thinking": False}, stop_token_ids=eos_token_ids(vllm_model_dir, vllm_tokenizer)
    )
    generator = Recording(VLLMGenerator(vllm_url, sampling=SamplingParams(temperature=temperature)))
    rollout_func = CorralRollout(gridsim, processor=processor, generator=generator, max_completion_length=256)
    rollouts = rollout_func.play([row["prompt"] for row in rollout_func.dataset.select(range(4))])
    rollout_func.close()
    generator.generator.close()
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32).eval()

    sampled_runs = [s.token_ids for s in generator.samples]
    kept_runs = [run for rollout in rollouts for run in runs_sampled(rollout)]
    assert sorted(map(tuple, kept_runs)) == sorted(map(tuple, sampled_runs))  # each as vLLM sampled it
    gaps, raw_gaps = [], []
    for rollout in rollouts:
        mask = torch.tensor(rollout.env_mask, dtype=torch.bool)
        served = torch.tensor(rollout.logprobs)[mask]
        gaps.append((served - trainer_logprobs(model, rollout, temperature)[mask]).abs().max().item())
        raw_gaps.append((served - trainer_logprobs(model, rollout, 1.0)[mask]).abs().max().item())
    assert max(gaps) < TOLERANCE, gaps
    if temperature != 1.0:  # the test tells processed logprobs from raw ones: those would miss by far more
        assert min(raw_gaps) > 20 * TOLERANCE, raw_gaps


def runs_sampled(rollout: Rollout) -> list[list[int]]:
    """The maximal runs of completion ids the model sampled, one per turn."""
    runs: list[list[int]] = []
    for i, (token, sampled) in enumerate(zip(rollout.completion_ids, rollout.env_mask, strict=True)):
        if sampled:
            if i == 0 or not rollout.env_mask[i - 1]:
                runs.append([])
            runs[-1].append(token)
    return runs
