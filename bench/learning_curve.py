"""A learning curve that rises on a CPU: the tiny model learns the codeword bundle through corral.

    python bench/learning_curve.py            # the full run: a table, curve.json and curve.png
    python bench/learning_curve.py --short    # a few steps of each stage (the test suite's)

The task (bundles/codeword): each task hides a table of code words and numbers and names one code
word; the agent calls `lookup(word)`, then `submit(number)` with the number it read. The reward is
graded: 0.3 for looking the word up, 0.7 for submitting its number first. Every task draws its
numbers afresh, so an agent must copy them from the tool's answer, and the eval tasks are tasks
the training never saw.

1. Serve the bundle in this process (local sandbox, warm pool), recording every episode
   (`--records DIR` keeps them, for `corral episodes DIR`).
2. Play noisy gold calls on the server: a share of the conversations looks up the wrong word, or
   submits a wrong number, as a sloppy teacher would. SFT can imitate the teacher, noise and all;
   only the reward says which answers were right.
3. Make the tiny model, with a tokenizer trained on those conversations (one takes ~100 ids).
4. Evaluate with `corral.training.evaluate` (k samples of each held-out eval task, temperature 1):
   before SFT, after SFT, and every few steps of GRPO.
5. SFT on the noisy gold conversations (the `sft` preset), then GRPO through the live server
   (`CorralRollout` as rollout_func, the preset of `--preset`, the trainer's own model sampling
   many episodes in one padded generate).
6. Write the table (curve.md), the numbers (curve.json) and the plot (curve.png, with matplotlib).

After SFT it also times the trainer's generation paths side by side on the same episodes (the eval
tasks' prompts, played by the SFT model): HF `generate` one request at a time
(`TransformersGenerator`) against one padded call for all the episodes waiting
(`BatchedGenerator`), both computing logprobs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from corral.client import Bundle
from corral.training.batching import BatchedGenerator
from corral.training.eval_report import EvalReport
from corral.training.evaluation import evaluate
from corral.training.generation import TransformersGenerator
from corral.training.presets import preset
from corral.training.processors import HermesProcessor
from corral.training.rollouts import CorralRollout, chat_tools, episode_reward
from corral.training.sft import NO_THINKING, gold_dataset
from corral.training.tiny import CPU_RUN_SETTINGS, make_tiny_model, one_cpu_thread

CODEWORD = Path(__file__).resolve().parent.parent / "bundles" / "codeword"
RESULTS = Path(__file__).resolve().parent / "results" / "learning_curve"
MAX_COMPLETION_LENGTH = 96  # a lookup call, its answer, a submit call, its answer, the closing turn: ~60 ids
GENERATION_BATCH = 32  # episodes in play at once when timing the generation paths (a GRPO step's worth)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="a few steps of each stage, few eval tasks")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the table, numbers and plot go")
    parser.add_argument("--records", type=Path, help="keep every episode's records there (default: dropped at the end)")
    parser.add_argument("--wrong-lookup", type=float, default=0.2, help="gold noise: share that looks up another word")
    parser.add_argument("--wrong-number", type=float, default=0.3, help="gold noise: share that submits a wrong number")
    parser.add_argument("--sft-steps", type=int, default=1500)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--preset", default="dapo")
    parser.add_argument("--grpo-steps", type=int, default=120)
    parser.add_argument("--grpo-lr", type=float, default=3e-4)
    parser.add_argument("--prompts", type=int, default=8, help="tasks per GRPO step")
    parser.add_argument("--group", type=int, default=4, help="rollouts per task (num_generations)")
    parser.add_argument("--eval-tasks", type=int, default=64, help="held-out eval tasks per evaluation (all: 64)")
    parser.add_argument("--eval-k", type=int, default=2, help="samples per eval task")
    parser.add_argument("--eval-every", type=int, default=10, help="GRPO steps between evaluations")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    if opts.short:
        opts.sft_steps, opts.grpo_steps, opts.eval_every, opts.eval_tasks = 20, 4, 2, 8
    return opts


def noisy_gold(tasks: list[dict[str, Any]], opts: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Each task's gold calls, with the teacher's mistakes: another word looked up (and its number
    submitted), or a wrong number submitted."""
    rng = random.Random(opts.seed)
    calls = {}
    for task in tasks:
        numbers, word = task["args"]["numbers"], task["args"]["word"]
        if rng.random() < opts.wrong_lookup:
            word = rng.choice([w for w in numbers if w != word])
        number = numbers[word]
        if rng.random() < opts.wrong_number:
            number = rng.choice([n for n in range(10, 100) if n != number])
        calls[task["id"]] = [
            {"name": "lookup", "arguments": {"word": word}},
            {"name": "submit", "arguments": {"number": number}},
        ]
    return calls


class Curve:
    """The evaluations so far: one point per evaluation, at the training step it was made."""

    def __init__(self, bundle: Bundle, opts: argparse.Namespace, records: Path):
        self.bundle, self.opts, self.records = bundle, opts, records
        self.points: list[dict[str, Any]] = []

    def evaluate(self, stage: str, step: int, model: Any, tokenizer: Any = None) -> EvalReport:
        with one_cpu_thread():
            report = evaluate(
                model,
                self.bundle,
                split="eval",
                k=self.opts.eval_k,
                concurrency=16,
                tokenizer=tokenizer,
                max_completion_length=MAX_COMPLETION_LENGTH,
                max_tool_calls=4,
                limit=self.opts.eval_tasks,
                record_dir=self.records,
                progress=False,
            )
        point = {
            "stage": stage,
            "step": step,
            "mean_reward": report.mean_reward,
            "seconds": report.seconds,
            "episodes": report.episodes,
            "unscored": sum(report.unscored_reasons.values()),
            **{f"pass@{k}": value for k, value in report.pass_at.items()},
        }
        self.points.append(point)
        say(
            f"[eval] {stage} (step {step}): mean reward {report.mean_reward:.3f}, "
            + ", ".join(f"pass@{k} {v:.3f}" for k, v in report.pass_at.items() if v is not None)
            + f" ({report.episodes} episodes in {report.seconds:.1f}s)"
        )
        return report


class EvaluateDuringGRPO(TrainerCallback):
    def __init__(self, curve: Curve, sft_steps: int, every: int):
        self.curve, self.sft_steps, self.every = curve, sft_steps, every

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.every == 0:
            self.curve.evaluate(
                f"GRPO step {state.global_step}", self.sft_steps + state.global_step, model, processing_class
            )
        return control


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = parse(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="corral-curve-"))
    records = opts.records or work / "records"
    tasks = [json.loads(line) for line in (CODEWORD / "tasks.jsonl").read_text().splitlines()]
    with Bundle.local(
        CODEWORD, split="train", sandbox="local", max_concurrent_envs=64, warm_pool=8, record_dir=records
    ) as bundle:
        tools = chat_tools(bundle.toolsets["codeword"])  # as CorralRollout renders them
        gold = gold_dataset(bundle, noisy_gold(tasks, opts), concurrency=8, tools=tools)
        rewards = gold["reward"]
        say(
            f"gold: {len(gold)} noisy conversations played on the server, mean reward {sum(rewards) / len(rewards):.3f}"
        )
        chats = [{"messages": messages, "tools": tools, **NO_THINKING} for messages in gold["messages"]]
        model_dir = make_tiny_model(
            work / "model",
            seed=opts.seed,
            chats=chats,
            vocab_size=768,
            split_digits=True,
            common_lines=True,
            hidden_size=128,
            max_positions=512,
        )
        curve = Curve(bundle, opts, records)
        curve.evaluate("before SFT", 0, str(model_dir))

        sft = preset("sft")
        sft_dir = work / "sft"
        trainer = sft.trainer(
            model=str(model_dir),
            train_dataset=gold,
            args=sft.config(
                output_dir=str(sft_dir),
                max_steps=opts.sft_steps,
                learning_rate=opts.sft_lr,
                per_device_train_batch_size=16,
                max_length=512,
                logging_steps=10,
                save_strategy="no",
                seed=opts.seed,
                **CPU_RUN_SETTINGS,
            ),
        )
        with one_cpu_thread():
            trainer.train()
        trainer.save_model(str(sft_dir))
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        say(f"SFT: {trainer.state.global_step} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        curve.evaluate("after SFT", opts.sft_steps, str(sft_dir))
        speed = generation_speed(bundle, sft_dir, opts)

        rollout = CorralRollout(bundle, max_tool_calls=4, record_dir=records)
        algorithm = preset(opts.preset)
        args = algorithm.config(
            output_dir=str(work / "grpo"),
            max_steps=opts.grpo_steps,
            learning_rate=opts.grpo_lr,
            per_device_train_batch_size=opts.prompts * opts.group,
            num_generations=opts.group,
            max_completion_length=MAX_COMPLETION_LENGTH,
            chat_template_kwargs=NO_THINKING,
            logging_steps=1,
            save_strategy="no",
            seed=opts.seed,
            **CPU_RUN_SETTINGS,
        )
        trainer = algorithm.trainer(
            model=str(sft_dir),
            args=args,
            train_dataset=rollout.dataset,
            reward_funcs=episode_reward,
            rollout_func=rollout,
        )
        trainer.add_callback(EvaluateDuringGRPO(curve, opts.sft_steps, opts.eval_every))
        with one_cpu_thread():
            trainer.train()
        rollout.close()
        train_rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
        say(
            f"GRPO ({opts.preset}): {trainer.state.global_step} steps; training reward "
            f"{train_rewards[0]:.3f} -> {train_rewards[-1]:.3f}"
        )
        if trainer.state.global_step % opts.eval_every:
            curve.evaluate(
                f"GRPO step {trainer.state.global_step}",
                opts.sft_steps + trainer.state.global_step,
                trainer.model,
                trainer.processing_class,
            )

    seconds = time.monotonic() - started
    result = {
        "seconds": seconds,
        "options": {k: str(v) for k, v in vars(opts).items()},
        "points": curve.points,
        "gold_reward": sum(rewards) / len(rewards),
        "grpo_training_reward": train_rewards,
        "generation_speed": speed,
    }
    write_results(result, opts)
    shutil.rmtree(work, ignore_errors=True)
    say(f"done in {seconds:.0f}s; results in {opts.out}")
    return result


def generation_speed(bundle: Bundle, model_dir: Path, opts: argparse.Namespace) -> dict[str, Any]:
    """Play the same episodes (each eval task, `eval_k` times, 32 at once) with each generation path, and
    time them."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    eos = model.generation_config.eos_token_id
    processor = HermesProcessor.for_trainer(
        tokenizer, NO_THINKING, stop_token_ids=eos if isinstance(eos, list) else [eos]
    )
    timed: dict[str, Any] = {}
    for name, generator in (
        ("one at a time", TransformersGenerator(model)),
        ("batched", BatchedGenerator(model, pad_token_id=tokenizer.pad_token_id)),
    ):
        rollout = CorralRollout(
            bundle,
            processor=processor,
            generator=generator,
            max_tool_calls=4,
            max_completion_length=MAX_COMPLETION_LENGTH,
        )
        prompts = [
            row["prompt"]
            for row in rollout.dataset_for("eval").select(range(opts.eval_tasks))
            for _ in range(opts.eval_k)
        ]
        started = time.monotonic()
        with one_cpu_thread():
            played = rollout.play(prompts, concurrency=GENERATION_BATCH)
        seconds = time.monotonic() - started
        rollout.close()
        samples = sum(
            sum(1 for i, m in enumerate(r.env_mask) if m and (i == 0 or not r.env_mask[i - 1])) for r in played
        )
        timed[name] = {
            "seconds": round(seconds, 2),
            "episodes": len(played),
            "samples": samples,
            "mean_reward": sum(r.reward or 0 for r in played) / len(played),
        }
    timed["speed-up"] = round(timed["one at a time"]["seconds"] / timed["batched"]["seconds"], 2)
    say(
        f"generation, same {len(prompts)} episodes: one at a time {timed['one at a time']['seconds']}s, batched "
        f"{timed['batched']['seconds']}s: {timed['speed-up']}x"
    )
    return timed


def write_results(result: dict[str, Any], opts: argparse.Namespace) -> None:
    """curve.json, curve.md (the table) and curve.png (the plot, when matplotlib is installed)."""
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "curve.json").write_text(json.dumps(result, indent=1))
    ks = sorted({int(key.split("@")[1]) for point in result["points"] for key in point if key.startswith("pass@")})
    lines = [
        "| stage | step | mean eval reward | " + " | ".join(f"pass@{k}" for k in ks) + " | eval time |",
        "|---|---|---|" + "---|" * len(ks) + "---|",
    ]
    for point in result["points"]:
        passes = " | ".join(f"{point.get(f'pass@{k}') or 0:.3f}" for k in ks)
        lines.append(
            f"| {point['stage']} | {point['step']} | {point['mean_reward']:.3f} | {passes} | "
            f"{point['seconds']:.1f}s ({point['episodes']} episodes) |"
        )
    speed = result["generation_speed"]
    lines += [
        "",
        (
            f"Generation on the same {speed['batched']['episodes']} episodes ({speed['batched']['samples']} "
            f"samples batched, {speed['one at a time']['samples']} one at a time): one request at a time "
            f"{speed['one at a time']['seconds']}s, batched {speed['batched']['seconds']}s, "
            f"{speed['speed-up']}x faster. Whole run: {result['seconds']:.0f}s."
        ),
    ]
    table = "\n".join(lines)
    (opts.out / "curve.md").write_text(table + "\n")
    print(table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib is not installed (pip install -e '.[dev]'): no plot")
        return
    # x: GRPO steps; the evaluations before and after SFT sit left of GRPO's start.
    xs = [
        -2 * opts.eval_every
        if p["stage"] == "before SFT"
        else p["step"] - opts.sft_steps
        if p["step"] >= opts.sft_steps
        else 0
        for p in result["points"]
    ]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(
        range(1, len(result["grpo_training_reward"]) + 1),
        result["grpo_training_reward"],
        color="lightgrey",
        linewidth=1,
        label="GRPO training reward (per step)",
    )
    axes.plot(xs, [p["mean_reward"] for p in result["points"]], marker="o", label="mean eval reward")
    axes.plot(xs, [p.get("pass@1") or 0 for p in result["points"]], marker=".", linestyle="--", label="eval pass@1")
    axes.axhline(
        result["gold_reward"],
        color="tab:red",
        linewidth=0.8,
        linestyle=":",
        label=f"the noisy gold SFT imitates ({result['gold_reward']:.2f})",
    )
    axes.annotate("before SFT", (xs[0], 0.04), ha="center", fontsize=8)
    axes.annotate(
        f"after SFT\n({opts.sft_steps} steps)", (0, result["points"][1]["mean_reward"] - 0.12), ha="center", fontsize=8
    )
    axes.set(
        xlabel=f"GRPO step ({opts.preset}, {opts.prompts} tasks x {opts.group} rollouts each)",
        ylabel="reward on held-out eval tasks",
        ylim=(0, 1.05),
        title=f"tiny model learning bundles/codeword through corral ({opts.eval_tasks} eval tasks x {opts.eval_k})",
    )
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(opts.out / "curve.png", dpi=120)


def say(message: str) -> None:
    print(message, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
