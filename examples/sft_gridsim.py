"""SFT warm start on GridSim's gold calls, on exactly the context GRPO will generate from.

    python examples/sft_gridsim.py --model Qwen/Qwen3-4B --server http://env-host:8000 --lora
    python examples/sft_gridsim.py --tiny                     # a tiny model, 4 days, 2 steps, CPU

Every train day's gold episode (the optimal `submit_schedule` call from the bundle's gold.py,
then `end_turn`) is played against the server first, through the same environment class GRPO
uses, and must earn 1.0; the conversations keep the server's tool answers and the tools as
`Bundle.factory` offers them, and render with thinking off. `SFTTrainer` then trains on the
assistant turns only (the `sft` preset). The model is saved to `--output-dir/sft`, ready for
`examples/grpo.py --model OUTPUT_DIR/sft`. `--record DIR` records the gold episodes (and keeps
the tokenizer) there, for `corral view DIR`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import (
    GRIDSIM,
    add_arguments,
    keep_tokenizer,
    lora_config,
    open_bundle,
    resolve_model,
    run_training,
    say,
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--gold-bundle",
        type=Path,
        default=GRIDSIM,
        help="the bundle folder whose gold.py names the gold calls (default: %(default)s)",
    )
    parser.add_argument("--days", type=int, help="train on the split's first DAYS days (default: all; --tiny: 4)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (--tiny: 2)")
    parser.add_argument("--learning-rate", type=float, help="default 1e-5, 1e-4 with --lora, 3e-3 with --tiny")
    parser.add_argument("--batch-size", type=int, default=4, help="per device (default: %(default)s)")
    parser.add_argument("--grad-accum", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument(
        "--max-length",
        type=int,
        default=4096,
        help="tokens per conversation; a GridSim one is ~2,000 with Qwen3 (default: %(default)s)",
    )
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (needs peft) instead of all weights")
    parser.add_argument(
        "--concurrency", type=int, default=8, help="gold episodes played at once (default: %(default)s)"
    )
    return parser.parse_args(argv)


def progress(done: int, total: int) -> None:
    if done % 100 == 0 or done == total:
        say(f"played {done}/{total} gold episodes")


def main(argv: list[str] | None = None) -> Path:
    opts = parse(argv)
    model = resolve_model(opts)
    days = opts.days or (4 if opts.tiny else None)
    from corral.training.presets import activation_checkpointing, preset
    from corral.training.sft import gold_dataset, load_gold_calls

    keep_tokenizer(opts, model)
    calls = load_gold_calls(opts.gold_bundle, opts.split)
    say(f"gold calls for {len(calls)} {opts.split} tasks from {opts.gold_bundle / 'gold.py'}")
    with open_bundle(opts, sandbox="local" if opts.tiny else "auto", max_concurrent_envs=opts.concurrency) as bundle:
        data = gold_dataset(bundle, calls, limit=days, min_reward=1.0, concurrency=opts.concurrency, progress=progress)
    say(f"{len(data)} gold episodes played on the server, lowest reward {min(data['reward']):g}")

    sft = preset("sft")
    settings = {
        "num_train_epochs": opts.epochs,
        "max_steps": 2 if opts.tiny and opts.max_steps < 0 else opts.max_steps,
        "per_device_train_batch_size": 2 if opts.tiny else opts.batch_size,
        "gradient_accumulation_steps": 1 if opts.tiny else opts.grad_accum,
        "learning_rate": opts.learning_rate or (3e-3 if opts.tiny else 1e-4 if opts.lora else 1e-5),
        "max_length": 2048 if opts.tiny else opts.max_length,
        "logging_steps": 1 if opts.tiny else 10,
        "save_strategy": "no",
        "seed": opts.seed,
    }
    if opts.tiny:
        from corral.training.tiny import CPU_RUN_SETTINGS

        settings.update(CPU_RUN_SETTINGS)
    else:
        settings.update(bf16=True, lr_scheduler_type="cosine", warmup_ratio=0.05, **activation_checkpointing(True))
    out = opts.output_dir / "sft"
    trainer = sft.trainer(
        model=model,
        args=sft.config(output_dir=str(out), **settings),
        train_dataset=data,
        peft_config=lora_config() if opts.lora else None,
    )
    say(
        f"SFT ({trainer.args.max_steps if trainer.args.max_steps > 0 else f'{opts.epochs:g} epoch(s)'}) "
        f"on {len(data)} conversations"
    )
    run_training(trainer, tiny=opts.tiny)
    if opts.lora:  # merged, so that `grpo.py --model OUT/sft` (and vLLM) load a plain model
        trainer.model.merge_and_unload().save_pretrained(str(out))
        trainer.processing_class.save_pretrained(str(out))
    else:
        trainer.save_model(str(out))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    say(f"done: {trainer.state.global_step} steps, last loss {losses[-1] if losses else 'n/a'}; model saved to {out}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
