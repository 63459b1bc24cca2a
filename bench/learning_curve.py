"""A learning curve on GridSim, on this CPU: SFT warm start on gold calls, then GRPO, evaluated.

    .venv/bin/python bench/learning_curve.py            # ~17 min on 2 shared cores; more when busy

1. Make a tiny random Qwen3-style model (`corral.training.tiny`) and serve GridSim in-process
   (`Bundle.local`, sandbox "local").
2. Evaluate it on the first `--eval-days` days of the eval split.
3. SFT it on the gold calls of the first `--train-days` train days (played on the server, each
   checked to earn the optimum, 1.0), until `--format-target` of sampled answers to train prompts
   parse into a valid `submit_schedule` call (24 integers), or `--sft-max-steps`. Evaluate.
4. GRPO it against the live server for `--grpo-steps` steps with a preset (`--preset`). Evaluate.

An evaluation plays `--eval-generations` rollouts per eval day with `GRPOTrainer.evaluate`
(the training rollout code: same rendering, tool loop and server rewards) and prints the mean
reward and the share of rollouts whose schedule the env accepted (24 integers) and found
feasible (reward above 0). A reward of 0.2 is an idle day, 1.0 the optimum.

The tiny model has 2 layers of width 64 and a 1,024-token vocabulary, and GridSim's prompt (the
system prompt, the two tools' schemas and the day's price table) is ~1,730 of its 2,048 positions:
it can learn the call's format, not much scheduling. Timings depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import TrainerCallback

from corral.client import Bundle
from corral.training.presets import preset
from corral.training.sft import gold_dataset, load_gold_calls, sampled_tool_calls, trainer_tools
from corral.training.tiny import CPU_RUN_SETTINGS, make_tiny_model, one_cpu_thread

GRIDSIM = Path(__file__).resolve().parent.parent / "bundles" / "gridsim"
HOURS = 24


@dataclass
class Outcome:
    """What one rollout did: its reward and the env's answers to its submissions."""

    reward: float | None
    answers: list[dict[str, Any]]

    @property
    def accepted(self) -> bool:
        """The env took a schedule of 24 integers (feasible or not)."""
        return any(answer.get("submitted") for answer in self.answers)

    @property
    def feasible(self) -> bool:
        return self.reward is not None and self.reward > 0


def recording(factory: type) -> tuple[type, list[Outcome]]:
    """A subclass of the environment class that records each rollout's outcome; same name (TRL
    names the reward column after it) and same tool schemas (`functools.wraps`)."""
    outcomes: list[Outcome] = []
    base_submit = factory.submit_schedule

    def reset(self, **row: Any) -> str | None:
        self._answers = []
        return factory.reset(self, **row)

    @functools.wraps(base_submit)
    def submit_schedule(self, **arguments: Any) -> str:
        answer = base_submit(self, **arguments)
        try:
            self._answers.append(json.loads(answer))
        except json.JSONDecodeError:  # "The episode has ended." and the like
            pass
        return answer

    def get_reward(self) -> float | None:
        reward = factory.get_reward(self)
        outcomes.append(Outcome(reward, self._answers))
        return reward

    namespace = {"reset": reset, "submit_schedule": submit_schedule, "get_reward": get_reward}
    return type(factory.__name__, (factory,), namespace), outcomes


def is_valid_submission(calls: list[dict[str, Any]]) -> bool:
    """Exactly one call, of submit_schedule, with 24 integers: what the env accepts."""
    match calls:
        case [{"function": {"name": "submit_schedule", "arguments": {"actions": list(actions)}}}]:
            return len(actions) == HOURS and all(type(a) is int for a in actions)
    return False


class FormatGate(TrainerCallback):
    """Every `every` SFT steps, sample answers to train prompts; stop once enough are valid calls."""

    def __init__(self, tokenizer: Any, prompts: list, tools: list, target: float, every: int, samples: int) -> None:
        self.tokenizer, self.prompts, self.tools = tokenizer, prompts, tools
        self.target, self.every, self.samples = target, every, samples
        self.history: list[tuple[int, float]] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every:
            return control
        answers = sampled_tool_calls(model, self.tokenizer, self.prompts, self.tools, samples=self.samples,
                                     max_new_tokens=160, seed=state.global_step)
        share = sum(map(is_valid_submission, answers)) / len(answers)
        parsed = sum(bool(calls) for calls in answers) / len(answers)
        self.history.append((state.global_step, share))
        loss = next((f"{e['loss']:.3f}" for e in reversed(state.log_history) if "loss" in e), "-")
        print(f"  SFT step {state.global_step}: loss {loss}; of {len(answers)} samples, {parsed:.0%} parse as "
              f"tool calls, {share:.0%} as a valid submit_schedule call", flush=True)
        control.should_training_stop = share >= self.target
        return control


def grpo_args(out: Path, opts: argparse.Namespace):
    """The GRPO settings of every stage: the preset's algorithm, sized for the tiny model on CPU."""
    return preset(opts.preset).config(
        output_dir=str(out), max_steps=opts.grpo_steps, learning_rate=opts.grpo_lr,
        per_device_train_batch_size=opts.group * 2, num_generations=opts.group,
        per_device_eval_batch_size=opts.eval_generations * 4, num_generations_eval=opts.eval_generations,
        # a call of 24 integers (~75 tokens), its answer (~100), end_turn and its answer, a last turn
        max_completion_length=320, max_tool_calling_iterations=2,
        chat_template_kwargs={"enable_thinking": False}, logging_steps=1, save_strategy="no", seed=opts.seed,
        **CPU_RUN_SETTINGS,
    )


def evaluate(stage: str, trainer: Any, outcomes: list[Outcome], results: dict) -> None:
    """Play the eval rollouts with `trainer.evaluate()` and print what they scored."""
    outcomes.clear()
    started = time.monotonic()
    with one_cpu_thread():
        trainer.evaluate()
    rewards = [o.reward if o.reward is not None else 0.0 for o in outcomes]
    results[stage] = {
        "rollouts": len(outcomes),
        "mean_reward": statistics.fmean(rewards),
        "accepted": sum(o.accepted for o in outcomes) / len(outcomes),
        "feasible": sum(o.feasible for o in outcomes) / len(outcomes),
        "unscored": sum(o.reward is None for o in outcomes),
    }
    r = results[stage]
    print(f"[eval {stage}] {r['rollouts']} rollouts: mean reward {r['mean_reward']:.3f}; schedule accepted "
          f"{r['accepted']:.0%}, feasible {r['feasible']:.0%}; unscored {r['unscored']} "
          f"({time.monotonic() - started:.0f}s)", flush=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-days", type=int, default=64, help="gold conversations to SFT on")
    parser.add_argument("--eval-days", type=int, default=8, help="eval-split days to evaluate on")
    parser.add_argument("--eval-generations", type=int, default=2, help="rollouts per eval day")
    parser.add_argument("--sft-max-steps", type=int, default=400)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--format-target", type=float, default=0.8,
                        help="stop SFT once this share of sampled answers is a valid submit_schedule call")
    parser.add_argument("--format-every", type=int, default=50, help="SFT steps between format checks")
    parser.add_argument("--preset", default="grpo")
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.add_argument("--grpo-lr", type=float, default=3e-4)
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt in GRPO")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="kept when given; a temporary folder otherwise")
    opts = parser.parse_args(argv)

    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="corral-curve-"))
    model_dir = workdir / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    make_tiny_model(model_dir, seed=opts.seed)
    results: dict[str, Any] = {}
    started = time.monotonic()
    with Bundle.local(GRIDSIM, split="train", sandbox="local", max_concurrent_envs=16) as env:
        factory, outcomes = recording(env.factory)
        train_rows = env.dataset.select(range(opts.train_days))
        eval_rows = env.dataset_for("eval").select(range(opts.eval_days))
        gold = gold_dataset(env, load_gold_calls(GRIDSIM, "train"), limit=opts.train_days, min_reward=1.0)
        print(f"gold: {len(gold)} train days played on the server, mean reward "
              f"{statistics.fmean(gold['reward']):.3f}", flush=True)

        from trl import GRPOTrainer  # slow to import: after the cheap checks above

        def grpo(model: str, out: str) -> GRPOTrainer:
            return GRPOTrainer(model=model, args=grpo_args(workdir / out, opts),
                               train_dataset=train_rows, eval_dataset=eval_rows, environment_factory=factory)

        evaluate("before SFT", grpo(str(model_dir), "eval-before"), outcomes, results)

        sft = preset("sft")
        sft_out = workdir / "sft"
        trainer = sft.trainer(
            model=str(model_dir), train_dataset=gold,
            args=sft.config(output_dir=str(sft_out), max_steps=opts.sft_max_steps, learning_rate=opts.sft_lr,
                            per_device_train_batch_size=4, max_length=2048, logging_steps=5,
                            save_strategy="no", seed=opts.seed, **CPU_RUN_SETTINGS),
        )
        probes = [row["prompt"] for row in train_rows.select(range(min(8, len(train_rows))))]
        gate = FormatGate(trainer.processing_class, probes, trainer_tools(factory()), opts.format_target,
                          opts.format_every, samples=2)
        trainer.add_callback(gate)
        with one_cpu_thread():
            trainer.train()
        trainer.save_model(str(sft_out))
        results["sft"] = {"steps": trainer.state.global_step, "format_checks": gate.history}
        print(f"SFT: {trainer.state.global_step} steps; valid-call share by step: {gate.history}", flush=True)
        evaluate("after SFT", grpo(str(sft_out), "eval-after-sft"), outcomes, results)

        trainer = grpo(str(sft_out), "grpo")
        outcomes.clear()
        with one_cpu_thread():
            trainer.train()
        train_rewards = [o.reward for o in outcomes if o.reward is not None]
        results["grpo"] = {"steps": trainer.state.global_step, "train_rollouts": len(outcomes),
                           "train_mean_reward": statistics.fmean(train_rewards) if train_rewards else None}
        print(f"GRPO ({opts.preset}): {trainer.state.global_step} steps, {len(outcomes)} training rollouts, "
              f"mean training reward {results['grpo']['train_mean_reward']}", flush=True)
        evaluate("after GRPO", trainer, outcomes, results)

    print(f"\nlearning curve ({time.monotonic() - started:.0f}s; workdir {workdir}):")
    for stage in ("before SFT", "after SFT", "after GRPO"):
        r = results[stage]
        print(f"  {stage:<11} mean eval reward {r['mean_reward']:.3f}   accepted {r['accepted']:.0%}   "
              f"feasible {r['feasible']:.0%}   ({r['rollouts']} rollouts)")
    if opts.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
