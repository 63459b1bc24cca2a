"""What a rollout_func samples with under a GRPOTrainer: the policy being trained, and no other.

GRPO's update assumes the rollouts were sampled from the model it trains. With the HF path the
sampler is the trainer's own model, unwrapped as TRL unwraps it to generate; with vLLM in server
mode it is that server, to which TRL pushes the trainer's weights before each generation. Any
other pairing samples from weights that are never updated, and training would go on silently
learning from a frozen policy, so it is refused with the setting that fixes it. Where NCCL is not
available (a CPU trainer), a `FileWeightSync` pushes the weights to the server instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from trl.distributed import DistributedBackend
from trl.models.utils import unwrap_model_for_generation

from corral.errors import ConfigError
from corral.training.batching import BatchedGenerator
from corral.training.generation import Generator, SamplingParams, VLLMGenerator
from corral.training.weight_sync import FileWeightSync

_LOOPBACK = {"0.0.0.0", "localhost", "127.0.0.1", "::1", "[::1]"}


@contextmanager
def trainer_policy(
    trainer: Any, generator: Generator | None, weight_sync: FileWeightSync | None = None
) -> Iterator[Generator]:
    """The generator that samples the trainer's policy, for the block (a rollout_func call).

    Args:
        trainer: The GRPOTrainer calling the rollout_func.
        generator: The rollout_func's own generator, if it was given one.
        weight_sync: Pushes the trainer's weights to the generator's server before it samples
            (instead of TRL's NCCL sync).

    Raises:
        ConfigError: the generator samples from a model the trainer does not update.
    """
    args = trainer.args
    if weight_sync is not None:
        url = getattr(generator, "base_url", None)
        if generator is None or url is None or not _same_server(url, weight_sync.base_url):
            raise ConfigError(
                f"the weight sync pushes to {weight_sync.base_url}, but CorralRollout samples from "
                f"{url or 'the trainer itself'}: pass generator=VLLMGenerator('{weight_sync.base_url}')"
            )
        weight_sync.push_for_step(trainer.accelerator.unwrap_model(trainer.model), trainer.state.global_step)
        yield generator
        return
    if generator is None and args.use_vllm:
        if args.vllm_mode != "server":
            raise ConfigError(_COLOCATED)
        generator = VLLMGenerator(vllm_server_url(args), sampling=SamplingParams.from_trainer_args(args))
    if generator is not None:
        check_policy(generator, args)
        yield generator
        return
    # The trainer's own model: unwrapped as TRL unwraps it to generate (gradient checkpointing off,
    # ZeRO-3 weights gathered, FSDP1's full parameters summoned), batched across episodes.
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
        ) as model,
        DistributedBackend(trainer.accelerator).summon_full_params(trainer.model_wrapped, recurse=False),
    ):
        yield BatchedGenerator(
            model,
            SamplingParams.from_trainer_args(args),
            logprobs=uses_sampling_logprobs(args),
            pad_token_id=trainer.processing_class.pad_token_id,
        )


def check_policy(generator: Generator, args: Any) -> None:
    """Refuse a server generator the trainer does not push its weights to."""
    url = getattr(generator, "base_url", None)
    if url is None:  # an in-process generator: the caller's own model, or a script
        return
    if not args.use_vllm:
        raise ConfigError(
            f"CorralRollout samples from the vLLM server at {url}, but use_vllm=False, so the trainer never "
            f"pushes its weights there and would train on samples of a frozen policy: set use_vllm=True, "
            f"vllm_mode='server', vllm_server_base_url='{url}' in the config, or drop the generator to sample "
            "with the trainer's own model"
        )
    if args.vllm_mode != "server":
        raise ConfigError(_COLOCATED)
    if _same_server(url, vllm_server_url(args)):
        return
    raise ConfigError(
        f"the trainer pushes its weights to {vllm_server_url(args)}, but CorralRollout samples from {url}: "
        f"sample from the same server (vllm_server_base_url='{url}', or a VLLMGenerator for "
        f"{vllm_server_url(args)})"
    )


def uses_sampling_logprobs(args: Any) -> bool:
    """Whether TRL 1.16 reads the sampling logprobs a rollout_func returns: for vLLM's importance
    sampling correction, and for the off-policy sequence mask."""
    return bool(args.use_vllm and args.vllm_importance_sampling_correction) or (
        getattr(args, "off_policy_mask_threshold", None) is not None
    )


def vllm_server_url(args: Any) -> str:
    """The vLLM server the trainer syncs its weights to, as TRL finds it."""
    return (args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}").rstrip("/")


def _same_server(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    hosts = {first.hostname, second.hostname}
    return first.port == second.port and (len(hosts) == 1 or hosts <= _LOOPBACK)


_COLOCATED = (
    "CorralRollout cannot sample from colocated vLLM: that engine lives inside the trainer and is "
    "driven by TRL's own generation, not by a rollout_func. Serve the model with `trl vllm-serve` and "
    "set use_vllm=True, vllm_mode='server' (CorralRollout then samples from that server, which the "
    "trainer keeps in sync), or set use_vllm=False to sample with the trainer's own model"
)
