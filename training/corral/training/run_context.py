"""Where a trainer's rollouts sit in its run: the step, the group TRL sampled them in, the
policy version that generated them, and their advantage, all read from the trainer's own state.

TRL's sampler repeats each prompt `num_generations` times in a row across the whole generation
batch (split over the processes in order), so row `i` of the batch is member `i % n` of group
`i // n`. GRPOTrainer generates with the weights of its current global step (vLLM in server mode
is synced to them first), so the policy version is that step. The advantage is TRL's
(`sum_then_normalize`, the default): recomputed here from the episodes' rewards, because TRL
computes it only after the rollout_func returns; with other reward functions beside
`episode_reward`, or another aggregation, it is not known here and left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.protocol.records import RunHeader, TrainingContext
from corral.training.reward_function import episode_reward

_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def trainer_contexts(trainer: Any, count: int) -> list[TrainingContext]:
    """The context of this process's `count` rows of the trainer's current generation batch."""
    size = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    step = trainer.state.global_step
    first = trainer.accelerator.process_index * count
    return [
        TrainingContext(step=step, policy_version=step, group=(first + i) // size, group_index=(first + i) % size)
        for i in range(count)
    ]


def group_contexts(count: int, group_size: int, step: int | None) -> list[TrainingContext]:
    """The context of `count` rows sampled `group_size` at a time per prompt by one policy (an eval)."""
    return [
        TrainingContext(step=step, policy_version=step, group=i // group_size, group_index=i % group_size)
        for i in range(count)
    ]


def trainer_advantages(trainer: Any, rewards: Sequence[float | None]) -> list[float] | None:
    """TRL's advantages for the whole batch's episode rewards (None: unscored), or None when the
    trainer's reward is not `episode_reward` alone (then its advantage is not known here)."""
    import torch
    from trl.trainer.utils import nanstd

    if [getattr(f, "__wrapped__", f) for f in trainer.reward_funcs] != [
        episode_reward
    ] or trainer.args.multi_objective_aggregation != "sum_then_normalize":
        return None
    size = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    weight = float(trainer.reward_weights[0])
    values = torch.tensor([float("nan") if r is None else r * weight for r in rewards], dtype=torch.float64)
    grouped = values.view(-1, size)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(size)
    if trainer.scale_rewards == "batch":
        std = nanstd(values).expand_as(values) if values.numel() > 1 else torch.zeros_like(values)
    else:
        std = nanstd(grouped, dim=1).repeat_interleave(size) if size > 1 else torch.zeros_like(values)
    advantages = values - mean
    if trainer.scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).tolist()


def checkpoint_step(model: Any) -> int | None:
    """The global step of a checkpoint folder: its `trainer_state.json`, else its `checkpoint-N`
    name; None for anything else (a model in memory, a server, a folder no trainer saved)."""
    if not isinstance(model, str | Path) or "://" in str(model):
        return None
    folder = Path(model)
    state = folder / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text())["global_step"])
    named = _CHECKPOINT.search(folder.name)
    return int(named.group(1)) if named else None


SETTINGS = (
    "output_dir",  # an eval of one of its checkpoints joins the run by it
    "learning_rate",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_completion_length",
    "beta",
    "temperature",
    "loss_type",
    "scale_rewards",
    "max_steps",
    "num_train_epochs",
    "seed",
)


def trainer_header(trainer: Any, run: str, bundle: str, split: str) -> RunHeader:
    """A training run's header: the trainer's model and its key settings (`SETTINGS` of its args)."""
    config = getattr(trainer.model, "config", None)
    return RunHeader(
        run=run,
        kind="training",
        model=str(getattr(config, "_name_or_path", "") or ""),
        bundle=bundle,
        split=split,
        settings={name: getattr(trainer.args, name) for name in SETTINGS if hasattr(trainer.args, name)},
    )
