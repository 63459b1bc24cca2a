"""What the end-to-end TRL tests share: the settings of a short, quiet training run on the CPU."""

from __future__ import annotations

from typing import Any

CPU_RUN: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "seed": 0,
}
"""Fields every TRL config has (they come from `TrainingArguments`): train on the CPU in float32,
log every step, write no checkpoints, report to no tracker, seed the run."""
