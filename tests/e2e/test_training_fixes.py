"""The training path's fixes for a GPU box, each checked where it can be on a CPU: the vLLM model
name, missing logprobs, other EOS ids, truncated rollouts under `mask_truncated_completions`,
refusing a sampling policy the trainer does not train (or a weight sync it cannot make),
metrics through `log_metric` gathered across processes, and the HF path generating for many
episodes in one padded call."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import httpx
import torch
from transformers import AutoModelForCausalLM

from corral.client import Bundle
from corral.errors import ConfigError, GenerationError
from corral.training import rollouts as rollouts_module
from corral.training.cpu import one_cpu_thread
from corral.training.generation import Sample, SamplingParams, VLLMGenerator
from corral.training.rollouts import CorralRollout, episode_reward
from corral.training.weight_sync import FileWeightSync
from tests.conftest import FIXTURES
from tests.e2e.support import CPU_RUN
from tests.e2e.vllm_standin import serve_standin

pytestmark = [pytest.mark.trl, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.fixture(scope="module")
def toy() -> Iterator[Bundle]:
    """The toybox's `toy` split: one task, "Say apple.", scored 1 when the agent says apple."""
    with Bundle.local(FIXTURES / "toybox", split="toy", sandbox="local", max_concurrent_envs=4) as bundle:
        yield bundle


def say(word: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "say", "arguments": {"text": word}}) + "\n</tool_call>"


class Scripted:
    """Answers every turn with `policy(context)`, ending it on `end_id(stop_token_ids)`; keeps
    the stop ids it was asked to stop on."""

    def __init__(self, tokenizer, policy: Callable[[str], str], end_id: Callable[[list[int]], int] = lambda s: s[0]):
        self.tokenizer, self.policy, self.end_id = tokenizer, policy, end_id
        self.stop_token_ids: list[int] = []

    def generate(self, prompt_ids: list[int], *, max_new_tokens: int, stop_token_ids: list[int]) -> Sample:
        self.stop_token_ids = list(stop_token_ids)
        ids = self.tokenizer.encode(self.policy(self.tokenizer.decode(prompt_ids)), add_special_tokens=False)
        ids.append(self.end_id(stop_token_ids))
        return Sample(token_ids=ids, logprobs=[-0.5] * len(ids), stopped=True)


def fake_trainer(tokenizer, **args: Any) -> SimpleNamespace:
    """What CorralRollout reads of a GRPOTrainer, with TRL 1.16's defaults."""
    settings = {
        "chat_template_kwargs": {"enable_thinking": False},
        "max_completion_length": 256,
        "use_vllm": False,
        "vllm_mode": "server",
        "vllm_server_base_url": None,
        "vllm_server_host": "0.0.0.0",
        "vllm_server_port": 8000,
        "mask_truncated_completions": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "off_policy_mask_threshold": None,
        "vllm_importance_sampling_correction": True,
        "multi_objective_aggregation": "sum_then_normalize",
        **args,
    }
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    return SimpleNamespace(
        args=SimpleNamespace(**settings),
        processing_class=tokenizer,
        eos_token_ids=eos,
        model=SimpleNamespace(training=True),
        num_generations=2,
        num_generations_eval=2,
        _metrics=defaultdict(lambda: defaultdict(list)),
        state=SimpleNamespace(global_step=0),
        accelerator=SimpleNamespace(process_index=0),
        reward_funcs=[episode_reward],
        reward_weights=torch.ones(1),
        scale_rewards="group",
    )


def test_the_vllm_generator_asks_the_server_for_the_name_it_serves_the_model_under(model_dir, tokenizer) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    # After the documented SFT step the trainer's model is `out/sft`; the server knows its own name.
    with one_cpu_thread(), serve_standin(model, tokenizer, served_name="served-policy") as url:
        generator = VLLMGenerator(url, sampling=SamplingParams(temperature=1.0))
        sample = generator.generate(tokenizer.encode("hello"), max_new_tokens=4, stop_token_ids=[0])
        generator.close()

    assert generator.model == "served-policy"
    assert 1 <= len(sample.token_ids) <= 4 and len(sample.logprobs) == len(sample.token_ids)


def test_a_logprob_vllm_does_not_give_is_nan_as_trl_reads_it() -> None:
    def completions(request: httpx.Request) -> httpx.Response:
        choice = {"token_ids": [5, 6], "logprobs": {"token_logprobs": [None, -0.25]}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice]})

    generator = VLLMGenerator("http://vllm.invalid", model="policy")
    generator._http = httpx.Client(base_url="http://vllm.invalid", transport=httpx.MockTransport(completions))

    sample = generator.generate([1, 2, 3], max_new_tokens=8, stop_token_ids=[6])

    assert math.isnan(sample.logprobs[0]) and sample.logprobs[1] == -0.25


def test_a_turn_that_ends_on_another_eos_id_is_read_without_it(toy, tokenizer) -> None:
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    # vLLM also stops on the model's other EOS ids: here the turn ends on <|endoftext|>, not <|im_end|>.
    generator = Scripted(
        tokenizer, lambda context: "" if "<tool_response>" in context else say("apple"), end_id=lambda stops: endoftext
    )
    rollout_func = CorralRollout(toy, generator=generator)

    rollout_func([toy.dataset[0]["prompt"]] * 2, fake_trainer(tokenizer))
    rollout_func.close()

    assert endoftext in generator.stop_token_ids  # the generator is told to stop there too
    for rollout in rollout_func.last_rollouts:
        assert rollout.reward == 1.0
        assert "<|endoftext|>" not in json.dumps(rollout.messages)
        said = next(m for m in rollout.messages if m["role"] == "assistant")
        assert said["tool_calls"][0]["function"]["arguments"] == {"text": "apple"}


def test_a_truncated_rollout_leaves_the_loss_when_the_trainer_masks_truncated_completions(toy, tokenizer) -> None:
    generator = Scripted(tokenizer, lambda context: say("pear"))  # never ends its turn: cut by max_tool_calls
    rollout_func = CorralRollout(toy, generator=generator, max_tool_calls=2)

    masked = rollout_func([toy.dataset[0]["prompt"]] * 2, fake_trainer(tokenizer, mask_truncated_completions=True))
    kept = rollout_func([toy.dataset[0]["prompt"]] * 2, fake_trainer(tokenizer, mask_truncated_completions=False))
    rollout_func.close()

    assert all(r.truncated == "tool_calls" for r in rollout_func.last_rollouts)
    # The last id is the model's own <|im_end|>, so TRL's own check would keep it in the loss.
    assert all(ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") for ids in masked["completion_ids"])
    assert all(set(mask) == {0} for mask in masked["env_mask"])
    assert all(1 in mask for mask in kept["env_mask"])


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"use_vllm": False}, r"use_vllm=False.*set use_vllm=True, vllm_mode='server'"),
        ({"use_vllm": True, "vllm_mode": "colocate"}, r"colocated vLLM.*vllm_mode='server'"),
        (
            {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": "http://other:8000"},
            r"pushes its weights to http://other:8000.*same server",
        ),
    ],
)
def test_a_generator_that_does_not_sample_the_trained_policy_is_refused_with_the_fix(
    toy, tokenizer, settings: dict[str, Any], expected: str
) -> None:
    rollout_func = CorralRollout(toy, generator=VLLMGenerator("http://gpu-box:8001", model="policy"))

    with pytest.raises(ConfigError, match=expected):
        rollout_func([toy.dataset[0]["prompt"]] * 2, fake_trainer(tokenizer, **settings))


def test_a_weight_sync_to_another_server_than_the_generators_is_refused_with_the_fix(
    toy, tokenizer, tmp_path: Path
) -> None:
    sync = FileWeightSync("http://127.0.0.1:8002", tmp_path / "weights")
    rollout_func = CorralRollout(
        toy, generator=VLLMGenerator("http://127.0.0.1:8001", model="policy"), weight_sync=sync
    )

    with pytest.raises(ConfigError, match=r"pushes to http://127.0.0.1:8002.*VLLMGenerator\('http://127.0.0.1:8002'\)"):
        rollout_func([toy.dataset[0]["prompt"]] * 2, fake_trainer(tokenizer))
    assert not (tmp_path / "weights").exists()  # refused before anything was written


def test_a_tied_model_is_not_synced_through_a_file(model_dir: Path, tmp_path: Path) -> None:
    tied = AutoModelForCausalLM.from_pretrained(model_dir)  # the default tiny model ties its embeddings

    with pytest.raises(GenerationError, match="tied embeddings.*tie_word_embeddings=False"):
        FileWeightSync("http://127.0.0.1:8002", tmp_path / "weights").push(tied)


def test_rollout_metrics_go_through_log_metric_and_count_groups_across_processes(
    toy, tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One group of four spans two processes: here rank 0 (two rollouts that say apple: 1.0, 1.0);
    # rank 1's two rollouts said pear (0.0, 0.0). Rank-local counting sees two zero-variance groups.
    toolset = toy.split_toolsets[0]
    other_rank = [
        SimpleNamespace(
            toolset=toolset,
            reward=0.0,
            status="scored",
            unscored_reason=None,
            cause="scored",
            seconds={},
            truncated=None,
            tool_calls=2,
            tool_errors=0,
        )
    ] * 2
    monkeypatch.setattr(rollouts_module, "gather_object", lambda local: [*local, *other_rank], raising=False)
    generator = Scripted(tokenizer, lambda context: "" if "<tool_response>" in context else say("apple"))
    rollout_func = CorralRollout(toy, generator=generator)
    trainer = fake_trainer(tokenizer)
    trainer.num_generations = 4

    output = rollout_func([toy.dataset[0]["prompt"]] * 2, trainer)
    rollout_func.close()
    logged: dict[str, list[float]] = defaultdict(list)
    extra = {key: value for key, value in output.items() if key not in ("prompt_ids", "completion_ids", "logprobs")}
    rewards = episode_reward(completions=[[]] * 2, log_metric=lambda name, value: logged[name].append(value), **extra)

    assert rewards == [1.0, 1.0]
    assert not trainer._metrics  # TRL's private buffer is left alone
    assert logged["rollouts/scored"] == [4.0] and logged["rollouts/groups_zero_variance"] == [0.0]
    assert logged[f"rollouts/reward/{toolset}"] == [0.5]


def test_the_trainers_model_generates_for_many_episodes_in_one_padded_call(
    toy, model_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    calls: list[int] = []
    generate = type(AutoModelForCausalLM.from_pretrained(model_dir)).generate

    def counted(self, *args: Any, **kwargs: Any):
        calls.append(len(kwargs.get("input_ids", args[0] if args else [])))
        return generate(self, *args, **kwargs)

    rollout_func = CorralRollout(toy, max_tool_calls=2)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=48,
        chat_template_kwargs={"enable_thinking": False},
        **CPU_RUN,
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        args=args,
        train_dataset=rollout_func.dataset,
        reward_funcs=episode_reward,
        rollout_func=rollout_func,
    )
    monkeypatch.setattr(type(trainer.model), "generate", counted)
    with one_cpu_thread():
        trainer.train()
    rollout_func.close()

    played = rollout_func.last_rollouts
    samples = sum(sum(1 for i, m in enumerate(r.env_mask) if m and (i == 0 or not r.env_mask[i - 1])) for r in played)
    assert len(played) == 4 and samples >= 4
    assert len(calls) < samples and max(calls) > 1  # one padded call serves several episodes' turns
    # TRL does not use the sampling logprobs on this path, so none were computed.
    assert all(math.isnan(lp) for r in played for lp, m in zip(r.logprobs, r.env_mask, strict=True) if m)


def test_batched_samples_carry_the_models_logprobs_when_asked(toy, model_dir, tokenizer) -> None:
    from corral.training.batching import BatchedGenerator
    from corral.training.processors import HermesProcessor

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = BatchedGenerator(model, SamplingParams(temperature=0.7), pad_token_id=tokenizer.pad_token_id)
    rollout_func = CorralRollout(
        toy,
        processor=HermesProcessor.for_trainer(tokenizer, {"enable_thinking": False}),
        generator=generator,
        max_completion_length=40,
    )
    torch.manual_seed(0)
    with one_cpu_thread():
        played = rollout_func.play([toy.dataset[0]["prompt"]] * 3)
    rollout_func.close()

    samples = sum(sum(1 for i, m in enumerate(r.env_mask) if m and (i == 0 or not r.env_mask[i - 1])) for r in played)
    assert generator.calls < samples  # the three episodes' first turns shared a call
    for rollout in played:
        ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(rollout.prompt_ids) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(rollout.completion_ids)[:, None])[:, 0]
        mask = torch.tensor(rollout.env_mask, dtype=torch.bool)
        assert torch.allclose(torch.tensor(rollout.logprobs)[mask], expected[mask], atol=1e-4)
