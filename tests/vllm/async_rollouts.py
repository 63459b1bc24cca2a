"""AsyncGRPO's rollout side, for real: TRL's `AsyncRolloutWorker` spawns its rollout process, which
builds corral environments from the pickled factory and plays a served gridsim's tasks while a real
vLLM server generates, queueing TRL's own `RolloutSample`s. The trainer's side needs CUDA, so this
script plays its part: it reads the samples and raises the model version as a weight sync does.
Run by the real-vLLM tier's python; it writes the samples' places and where the records are.

    python tests/vllm/async_rollouts.py URL VLLM_URL MODEL_DIR OUT_DIR     # writes OUT_DIR/result.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from accelerate import PartialState
from transformers import AutoTokenizer
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

from corral.client import Bundle

GROUP = 2
VERSIONS = (3, 7)  # the model version before the first sync of this run, then after it
GROUPS_PER_VERSION = 2


def main(url: str, vllm_url: str, model_dir: str, out_dir: str) -> None:
    PartialState()  # as the trainer does first: TRL's worker logs through accelerate
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    samples = []
    with Bundle(url, split="train", record_dir=Path(out_dir) / "records") as bundle:
        dataset = bundle.dataset.select(range(2))
        worker = AsyncRolloutWorker(
            model_name="tiny",
            dataset=dataset,
            reward_funcs=[],
            processing_class=tokenizer,
            eos_token_ids=[tokenizer.eos_token_id],
            environment_factory=bundle.factory,
            num_generations=GROUP,
            max_inflight_tasks=GROUP,
            vllm_server_url=vllm_url,
            max_tokens=16,
            max_tool_calling_iterations=1,
            chat_template_kwargs={"enable_thinking": False},
            queue_maxsize=GROUP,
            child_ready_timeout=600,
        )
        worker.model_version = VERSIONS[0]
        worker.start()
        try:
            for version in VERSIONS:
                worker.model_version = version
                while sum(s["model_version"] == version for s in samples) < GROUP * GROUPS_PER_VERSION:
                    sample = worker.rollout_buffer.get(timeout=300)
                    samples.append(
                        {
                            "group": sample.group_id,
                            "model_version": sample.model_version,
                            "advantage": sample.advantage,
                            "prompt": sample.prompt[-1]["content"],
                        }
                    )
        finally:
            worker.stop()
        tasks = {row["task_id"]: row["prompt"][-1]["content"] for row in dataset}
    result = {"samples": samples, "tasks": tasks, "records": str(Path(out_dir) / "records")}
    (Path(out_dir) / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
