"""AsyncGRPO (`trl.experimental.async_grpo`): vLLM generates on one GPU while the trainer trains on another.

    # GPU 0: the generation server (TRL adds the weight-transfer engine and VLLM_SERVER_DEV_MODE=1)
    CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen3-4B --port 8001 --dtype bfloat16
    # GPU 1: the trainer
    CUDA_VISIBLE_DEVICES=1 python examples/async_grpo.py --model Qwen/Qwen3-4B \\
        --server http://env-host:8000 --vllm-server-url http://localhost:8001
    python examples/async_grpo.py --tiny            # CPU: checks what can be checked here (see below)

The trainer's rollout worker runs in a process it spawns, with no GPU: the factory
(`bundle.factory`) is pickled into it, and every environment, tool call and reward lives there,
talking to the corral server, while the worker samples each turn from the vLLM server and the
trainer pushes new weights to that server over NCCL every `--weight-sync-steps` steps.

`--tiny` cannot train here: AsyncGRPOTrainer needs a vLLM server (its HTTP API and NCCL weight
transfer; vLLM does not install on this machine) and CUDA (its packed training forward runs
flash-attention 3 kernels). It checks what does not need them: the run's `AsyncGRPOConfig` is
built, the factory is pickled and played in a spawned process exactly as the rollout worker
would (reset, a tool call, get_reward against the live server), and the vLLM server is probed.

`--record DIR` records the episodes there for `corral view DIR`: each environment's, with its
group and policy version, against a server's URL; the in-process server's, with a bundle folder.
"""

from __future__ import annotations

import argparse
import multiprocessing
import pickle
import sys
from typing import Any

from common import add_arguments, keep_tokenizer, lora_config, open_bundle, resolve_model, say

HOURS = 24


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--vllm-server-url",
        default="http://localhost:8001",
        help="the `trl vllm-serve` server on the other GPU (default: %(default)s)",
    )
    parser.add_argument("--max-steps", type=int, default=500)
    parser.add_argument("--num-generations", type=int, default=8, help="rollouts per task (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="rollouts per optimiser step (default: %(default)s)")
    parser.add_argument("--learning-rate", type=float, help="default 1e-6, 1e-5 with --lora")
    parser.add_argument(
        "--max-completion-length",
        type=int,
        default=1024,
        help="tokens the model may generate per turn (default: %(default)s)",
    )
    parser.add_argument("--max-tool-calls", type=int, default=4, help="tool-calling rounds per rollout")
    parser.add_argument(
        "--max-staleness",
        type=int,
        default=4,
        help="drop rollouts sampled more than this many weight versions ago (default: %(default)s)",
    )
    parser.add_argument("--weight-sync-steps", type=int, default=1)
    parser.add_argument(
        "--dtype", default="bfloat16", help="trainer dtype; serve vLLM with the same --dtype (default: %(default)s)"
    )
    parser.add_argument(
        "--lora",
        action="store_true",
        help="train a LoRA adapter (needs peft; serve vLLM with --enable-lora --max-lora-rank 32 and "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 to sync the adapter alone)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=128,
        help="sessions the in-process server allows, with a bundle folder as --server",
    )
    return parser.parse_args(argv)


def async_config(opts: argparse.Namespace):
    """The trainer's config. AsyncGRPO has its own loss (clipped ratio, global token normalisation),
    so the presets do not apply; `max_inflight_tasks` bounds how many episodes are open at once."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    batch = 2 if opts.tiny else opts.batch_size
    return AsyncGRPOConfig(
        output_dir=str(opts.output_dir / "async_grpo"),
        max_steps=2 if opts.tiny else opts.max_steps,
        num_generations=2 if opts.tiny else opts.num_generations,
        per_device_train_batch_size=batch,
        learning_rate=opts.learning_rate or (1e-5 if opts.lora else 1e-6),
        max_completion_length=64 if opts.tiny else opts.max_completion_length,
        max_tool_calling_iterations=1 if opts.tiny else opts.max_tool_calls,
        chat_template_kwargs={"enable_thinking": False},
        vllm_server_base_url=opts.vllm_server_url,
        max_staleness=opts.max_staleness,
        weight_sync_steps=opts.weight_sync_steps,
        max_inflight_tasks=max(opts.max_staleness, 1) * batch,
        dtype="float32" if opts.tiny else opts.dtype,
        logging_steps=1,
        save_steps=100,
        seed=opts.seed,
        **({"use_cpu": True, "report_to": "none"} if opts.tiny else {}),
    )


def play_in_spawned_process(pickled_factory: bytes, rows: list[dict[str, Any]]) -> list[float | None]:
    """What the rollout worker's child does with the factory: unpickle it, build one environment,
    and reuse it for episode after episode; here each episode submits an idle day."""
    environment = pickle.loads(pickled_factory)()
    rewards = []
    for row in rows:
        environment.reset(**row)
        environment.submit_schedule(actions=[0] * HOURS)
        rewards.append(environment.get_reward())
    return rewards


def vllm_server_answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = parse(argv)
    model = None if opts.tiny else resolve_model(opts)  # --tiny trains nothing, so it makes no model
    config = async_config(opts)
    say(
        f"AsyncGRPOConfig: {config.num_generations} rollouts per task, {config.per_device_train_batch_size} per "
        f"step, weights synced every {config.weight_sync_steps} step(s), max staleness {config.max_staleness}"
    )
    if model is not None:
        keep_tokenizer(opts, model)
    with open_bundle(opts, sandbox="local" if opts.tiny else "auto", max_concurrent_envs=opts.concurrency) as bundle:
        pickled = pickle.dumps(bundle.factory)  # AsyncGRPO refuses a factory that does not pickle
        rows = [bundle.dataset[i] for i in range(2)]
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # as the rollout worker starts its child
            rewards = pool.apply(play_in_spawned_process, (pickled, rows))
        say(
            f"the factory ({len(pickled)} bytes pickled) played {len(rows)} idle days in a spawned process: "
            f"rewards {rewards}"
        )
        server_up = vllm_server_answers(opts.vllm_server_url)
        say(f"vLLM server at {opts.vllm_server_url}: {'answers' if server_up else 'does not answer'}")
        if opts.tiny:
            say(
                "--tiny stops here: AsyncGRPOTrainer needs that vLLM server and a CUDA GPU (flash-attention 3), "
                "which this machine has not"
            )
            return {"config": config, "rewards": rewards, "vllm_server": server_up}
        if not server_up:
            sys.exit(
                f"error: no vLLM server answers at {opts.vllm_server_url}/health; start one on another GPU "
                f"with `CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model {model} --port 8001`, or pass "
                "--vllm-server-url"
            )
        from trl.experimental.async_grpo import AsyncGRPOTrainer

        trainer = AsyncGRPOTrainer(
            model=model,
            args=config,
            train_dataset=bundle.dataset,
            environment_factory=bundle.factory,
            peft_config=lora_config() if opts.lora else None,
        )
        trainer.train()
        trainer.save_model(config.output_dir)
        say(f"done: {trainer.state.global_step} steps; model saved to {config.output_dir}")
        return {"config": config, "rewards": rewards, "vllm_server": server_up}


if __name__ == "__main__":
    main(sys.argv[1:])
