"""The trainer's half of a step in the run's records: a TRL `TrainerCallback` that appends what the
trainer logs (loss, KL, entropy, clip ratio, grad norm, completion length, and corral's own
`rollouts/*` figures, which reach the trainer's log through the reward function) to
`DIR/<run>/metrics.ndjson`, one JSON object per log with its global step, for `corral view`.

    rollout = CorralRollout(env, record_dir="records")
    trainer = GRPOTrainer(..., rollout_func=rollout, callbacks=[RecordMetrics(rollout)])
"""

from __future__ import annotations

import json
import math
from typing import Any

from transformers import TrainerCallback

from corral.client.run_headers import METRICS
from corral.errors import ConfigError


class RecordMetrics(TrainerCallback):
    """Records every numeric value the trainer logs into the rollout's run (see the module)."""

    def __init__(self, rollout: Any):
        if rollout.records is None:
            raise ConfigError("RecordMetrics needs a recording rollout: CorralRollout(..., record_dir=DIR)")
        self.path = rollout.records.root / rollout.records.run / METRICS

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        values = {k: float(v) for k, v in logs.items() if isinstance(v, int | float) and math.isfinite(float(v))}
        with open(self.path, "a") as out:
            out.write(json.dumps({"step": state.global_step, **values}) + "\n")
