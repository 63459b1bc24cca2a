"""The trainer's weights pushed to a real vLLM server through a file (`FileWeightSync`, the CPU
stand-in for TRL's NCCL sync): vLLM samples with the pushed weights from the next request on,
by hand and under GRPO, where the rollout_func pushes them before each generation after an update.
Runs after the other modules of the tier (it changes the served weights) and puts them back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from corral.client import Bundle
from corral.training.generation import VLLMGenerator
from corral.training.rollouts import TASK_KEY, CorralRollout, episode_reward
from corral.training.tiny import one_cpu_thread
from corral.training.weight_sync import FileWeightSync
from tests.conftest import BUNDLES
from tests.e2e.support import CPU_RUN

pytestmark = [pytest.mark.vllm, pytest.mark.trl, pytest.mark.timeout(900)]

TOLERANCE = 2e-3


def served_gap(url: str, model, prompt: list[int]) -> float:
    """How far the logprobs vLLM gives for a sample of 32 ids are from `model`'s (temperature 1)."""
    generator = VLLMGenerator(url)
    sample = generator.generate(prompt, max_new_tokens=32, stop_token_ids=[])
    generator.close()
    ids = torch.tensor([prompt + sample.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
    return (torch.tensor(sample.logprobs) - expected).abs().max().item()


def sampled_length(completion_ids: list[list[int]], **_) -> list[float]:
    """A reward that differs within a group, so that each GRPO step changes the weights (a random
    model scores the same on every gridsim episode, which gives no gradient)."""
    return [float(len(ids)) for ids in completion_ids]


@pytest.fixture
def sync(vllm_url: str, vllm_model_dir: Path, tmp_path: Path) -> Iterator[FileWeightSync]:
    sync = FileWeightSync(vllm_url, tmp_path / "weights")
    yield sync
    sync.push(AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32))  # the served model again


def test_weights_pushed_through_a_file_are_the_ones_vllm_samples_with(
    vllm_url: str, vllm_model_dir: Path, vllm_tokenizer, sync: FileWeightSync
) -> None:
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32).eval()
    prompt = vllm_tokenizer.encode("Schedule the battery for the day.")
    assert served_gap(vllm_url, model, prompt) < TOLERANCE

    torch.manual_seed(0)
    with torch.no_grad():  # what an optimiser step does, writ large
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    stale = served_gap(vllm_url, model, prompt)
    sync.push(model)
    synced = served_gap(vllm_url, model, prompt)

    assert stale > 50 * TOLERANCE and synced < TOLERANCE, (stale, synced)


def test_grpo_with_a_vllm_server_samples_the_weights_it_trains(
    vllm_url: str, vllm_model_dir: Path, vllm_tokenizer, sync: FileWeightSync, tmp_path: Path
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    with Bundle.local(BUNDLES / "gridsim", split="train", sandbox="local", max_concurrent_envs=4) as env:
        rollout = CorralRollout(env, generator=VLLMGenerator(vllm_url), weight_sync=sync, max_tool_calls=2)
        dataset = rollout.dataset.select(range(2)).map(
            lambda row: {
                "prompt": [
                    {"role": "user", "content": f"Submit a schedule for {row['task_id']}.", TASK_KEY: row["task_id"]}
                ]
            }
        )
        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            max_steps=2,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=64,
            learning_rate=0.05,
            beta=0.0,
            chat_template_kwargs={"enable_thinking": False},
            **CPU_RUN,
        )
        trainer = GRPOTrainer(
            model=str(vllm_model_dir),
            args=args,
            train_dataset=dataset,
            reward_funcs=[episode_reward, sampled_length],
            rollout_func=rollout,
        )
        with one_cpu_thread():
            trainer.train()
        rollout.close()

    assert trainer.state.global_step == 2 and sync.pushed_step == 1  # pushed before step 2's generation
    trained = trainer.model.eval()
    prompt = vllm_tokenizer.encode("Schedule the battery for the day.")
    before_last_step = served_gap(vllm_url, trained, prompt)  # the server holds step 1's weights
    sync.push(trained)
    assert served_gap(vllm_url, trained, prompt) < TOLERANCE < before_last_step
