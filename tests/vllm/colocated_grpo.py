"""Two GRPO steps with vLLM colocated in the trainer's process (TRL's `vllm_mode="colocate"`),
against a served gridsim, run by the real-vLLM tier's python (vLLM cannot be imported beside the
suite's own transformers). It writes one JSON object: the resets and rewards the environments saw,
and TRL's log history, whose sampling metrics compare vLLM's logprobs with the trainer's.

    python tests/vllm/colocated_grpo.py URL MODEL_DIR OUT_DIR     # writes OUT_DIR/result.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl import GRPOConfig, GRPOTrainer
from vllm import _custom_ops

from corral.client import Bundle
from corral.training.cpu import one_cpu_thread
from corral.training.tiny import CPU_RUN_SETTINGS

# vLLM's CPU linear layers, where oneDNN runs (AVX-512 machines), pack their weights and drop
# the originals, so TRL's in-place weight load finds nothing to load into ("'Parameter' object
# has no attribute 'weight_loader'"); the plain torch GEMM keeps them on every machine.
_custom_ops._supports_onednn = False

GROUP = 4


def scattered(completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A reward that differs within a group, so that every step changes the weights (the
    untaught model scores the same on every gridsim episode, which gives no gradient)."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def main(url: str, model_dir: str, out_dir: str) -> None:
    seen: dict[str, list[Any]] = {"resets": [], "rewards": []}
    with Bundle(url, split="train") as bundle:
        base = bundle.factory

        class Gridsim(base):  # TRL names the reward column after the class
            def reset(self, **row: Any) -> str | None:
                seen["resets"].append(row["task_id"])
                return super().reset(**row)

            def get_reward(self) -> float | None:
                seen["rewards"].append(super().get_reward())
                return seen["rewards"][-1]

        Gridsim.__name__ = base.__name__
        dataset = bundle.dataset.select(range(2)).map(
            lambda row: {"prompt": [{"role": "user", "content": f"Submit a schedule for {row['task_id']}."}]}
        )
        args = GRPOConfig(
            output_dir=out_dir,
            max_steps=2,
            per_device_train_batch_size=GROUP,
            num_generations=GROUP,
            max_completion_length=64,
            max_tool_calling_iterations=2,
            learning_rate=0.05,
            beta=0.0,
            chat_template_kwargs={"enable_thinking": False},
            logging_steps=1,
            save_strategy="no",
            seed=0,
            use_vllm=True,
            vllm_mode="colocate",
            vllm_max_model_length=4096,
            vllm_gpu_memory_utilization=0.1,
            **CPU_RUN_SETTINGS,
        )
        trainer = GRPOTrainer(
            model=model_dir, args=args, train_dataset=dataset, environment_factory=Gridsim, reward_funcs=[scattered]
        )
        with one_cpu_thread():
            trainer.train()
    result = {**seen, "global_step": trainer.state.global_step, "log_history": trainer.state.log_history}
    (Path(out_dir) / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
