"""GRPO (or any preset) with TRL's GRPOTrainer against a corral server.

    # one GPU, vLLM colocated with the trainer, LoRA, from the SFT warm start:
    python examples/grpo.py --model out/sft --server http://env-host:8000 --use-vllm --lora
    # vLLM on its own GPU (`CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model Qwen/Qwen3-4B`):
    python examples/grpo.py --model Qwen/Qwen3-4B --server http://env-host:8000 \\
        --use-vllm --vllm-mode server --vllm-server-url http://localhost:8000
    python examples/grpo.py --tiny                            # a tiny model, 2 steps, CPU
    python examples/grpo.py --tiny --record records/ && corral view records/   # ... and read it

The trainer plays each rollout through `environment_factory=bundle.factory`: every tool call
is a call on the server, and the server's verifier gives the reward (`get_reward`), so there
are no `reward_funcs`. `--token-exact` trains instead through `corral.training.rollouts`
(`CorralRollout` as `rollout_func`): the trainer learns from the ids the model sampled, tool
answers masked out of the loss; with `--use-vllm --vllm-mode server` it samples from that
server's `/v1/completions`. `--record DIR` rolls out so too, and records the run in DIR (the
server's episodes, each rollout's step, group and tokens, the trainer's logged metrics, the
tokenizer) for `corral view DIR`.
"""

from __future__ import annotations

import argparse
import sys

from common import add_arguments, keep_tokenizer, lora_config, open_bundle, resolve_model, run_training, say


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--preset",
        default="grpo",
        help="grpo, dr_grpo, dapo, gspo, cispo, sapo, gmpo, reinforce (default: %(default)s)",
    )
    parser.add_argument("--eval-split", help="evaluate on this split every --eval-steps steps (e.g. eval)")
    parser.add_argument("--eval-steps", type=int, default=50)
    parser.add_argument("--days", type=int, help="train on the split's first DAYS tasks (default: all; --tiny: 2)")
    parser.add_argument("--max-steps", type=int, default=500, help="(--tiny: 2; default: %(default)s)")
    parser.add_argument("--num-generations", type=int, default=8, help="rollouts per task (--tiny: 2)")
    parser.add_argument("--batch-size", type=int, default=8, help="rollouts per device per step (--tiny: 2)")
    parser.add_argument("--grad-accum", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, help="default 1e-6, 1e-5 with --lora, 1e-4 with --tiny")
    parser.add_argument(
        "--max-completion-length",
        type=int,
        default=1024,
        help="ids after the prompt, tool answers included (--tiny: 64; default: %(default)s)",
    )
    parser.add_argument(
        "--max-tool-calls",
        type=int,
        default=4,
        help="tool-calling rounds per rollout (--tiny: 1; default: %(default)s)",
    )
    parser.add_argument("--use-vllm", action="store_true", help="generate with vLLM (needs vllm on this machine)")
    parser.add_argument("--vllm-mode", choices=["colocate", "server"], default="colocate")
    parser.add_argument(
        "--vllm-server-url",
        default="http://localhost:8000",
        help="a `trl vllm-serve` server, with --vllm-mode server (default: %(default)s)",
    )
    parser.add_argument(
        "--vllm-gpu-memory-utilization",
        type=float,
        default=0.35,
        help="share of the GPU colocated vLLM takes (default: %(default)s)",
    )
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (needs peft)")
    parser.add_argument(
        "--token-exact",
        action="store_true",
        help="roll out with corral.training.rollouts (--record does: it records each rollout's step and tokens)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=64,
        help="sessions the in-process server allows, with a bundle folder as --server",
    )
    return parser.parse_args(argv)


def grpo_settings(opts: argparse.Namespace) -> dict:
    """The run's settings (the preset adds the algorithm's); `--tiny` shrinks them to a CPU."""
    tiny = opts.tiny
    settings = {
        "max_steps": 2 if tiny else opts.max_steps,
        "num_generations": 2 if tiny else opts.num_generations,
        "per_device_train_batch_size": 2 if tiny else opts.batch_size,
        "gradient_accumulation_steps": 1 if tiny else opts.grad_accum,
        "learning_rate": opts.learning_rate or (1e-4 if tiny else 1e-5 if opts.lora else 1e-6),
        "max_completion_length": 64 if tiny else opts.max_completion_length,
        "max_tool_calling_iterations": 1 if tiny else opts.max_tool_calls,
        # Qwen3: no thinking block, so the context matches the SFT warm start's (examples/sft_gridsim.py)
        "chat_template_kwargs": {"enable_thinking": False},
        "logging_steps": 1,
        "save_strategy": "no" if tiny else "steps",
        "save_steps": 100,
        "seed": opts.seed,
    }
    if opts.eval_split:
        settings.update(
            eval_strategy="steps", eval_steps=opts.eval_steps, num_generations_eval=settings["num_generations"]
        )
    if tiny:
        from corral.training.tiny import CPU_RUN_SETTINGS

        settings.update(CPU_RUN_SETTINGS)
    else:
        settings.update(bf16=True)
    if opts.use_vllm:
        settings.update(use_vllm=True, vllm_mode=opts.vllm_mode)
        if opts.vllm_mode == "server":
            settings["vllm_server_base_url"] = opts.vllm_server_url
        else:
            settings["vllm_gpu_memory_utilization"] = opts.vllm_gpu_memory_utilization
    return settings


def main(argv: list[str] | None = None):
    opts = parse(argv)
    if opts.use_vllm:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            sys.exit(
                "error: --use-vllm needs vllm installed here (pip install corral[vllm]); drop --use-vllm "
                "to generate with transformers"
            )
    model = resolve_model(opts)
    from corral.training.presets import preset

    algorithm = preset(opts.preset)
    days = opts.days or (2 if opts.tiny else None)
    with open_bundle(opts, sandbox="local" if opts.tiny else "auto", max_concurrent_envs=opts.concurrency) as bundle:
        args = algorithm.config(output_dir=str(opts.output_dir / opts.preset), **grpo_settings(opts))
        peft = lora_config() if opts.lora else None
        rollout = None
        keep_tokenizer(opts, model)
        if opts.token_exact or opts.record:
            trainer, rollout = token_exact_trainer(algorithm, model, args, bundle, opts, days, peft)
        else:
            evaluation = bundle.dataset_for(opts.eval_split) if opts.eval_split else None
            trainer = algorithm.trainer(
                model=model,
                args=args,
                train_dataset=first(bundle.dataset, days),
                eval_dataset=evaluation,
                environment_factory=bundle.factory,
                peft_config=peft,
            )
        say(
            f"{algorithm.name}: {args.max_steps} steps of {args.per_device_train_batch_size} rollouts "
            f"({args.num_generations} per task), on {len(trainer.train_dataset)} tasks"
        )
        run_training(trainer, tiny=opts.tiny)
        rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
        say(f"done: {trainer.state.global_step} steps; mean reward per step: {[round(r, 3) for r in rewards]}")
        if not opts.tiny:
            trainer.save_model(str(opts.output_dir / opts.preset))
        if rollout is not None:
            rollout.close()
    return trainer


def token_exact_trainer(algorithm, model: str, args, bundle, opts: argparse.Namespace, days: int | None, peft):
    """A trainer that rolls out with `CorralRollout` (the ids the model sampled, tool answers masked),
    and the rollout_func, whose sessions the caller closes."""
    from corral.training.metrics_callback import RecordMetrics
    from corral.training.rollouts import CorralRollout, episode_reward

    if opts.use_vllm and opts.vllm_mode != "server":
        sys.exit(
            "error: --token-exact samples from a vLLM server: add --vllm-mode server (colocated vLLM "
            "is not supported by CorralRollout), or drop --use-vllm to sample with transformers"
        )
    # With --use-vllm --vllm-mode server, CorralRollout samples from the trainer's vLLM server (the one TRL
    # syncs the weights to), under the name that server lists at /v1/models; else from the trainer's model.
    rollout = CorralRollout(bundle, max_tool_calls=args.max_tool_calling_iterations, record_dir=opts.record)
    evaluation = rollout.dataset_for(opts.eval_split) if opts.eval_split else None
    # With --record, the trainer's loss, KL and the rest go into the run beside its rollouts.
    callbacks = [RecordMetrics(rollout)] if opts.record else None
    trainer = algorithm.trainer(
        model=model,
        args=args,
        train_dataset=first(rollout.dataset, days),
        eval_dataset=evaluation,
        reward_funcs=episode_reward,
        rollout_func=rollout,
        peft_config=peft,
        callbacks=callbacks,
    )
    return trainer, rollout


def first(dataset, days: int | None):
    """The dataset's first `days` rows (all of them for None)."""
    return dataset if days is None else dataset.select(range(min(days, len(dataset))))


if __name__ == "__main__":
    main(sys.argv[1:])
