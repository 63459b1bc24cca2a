"""What the end-to-end TRL tests share: the settings of a short, quiet training run on the CPU."""

from __future__ import annotations

from typing import Any

from corral.training.tiny import CPU_RUN_SETTINGS

CPU_RUN: dict[str, Any] = {**CPU_RUN_SETTINGS, "logging_steps": 1, "save_strategy": "no", "seed": 0}
"""Fields every TRL config has (they come from `TrainingArguments`): the tiny model's CPU run,
logging every step, writing no checkpoints, seeded."""
