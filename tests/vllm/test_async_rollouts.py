"""AsyncGRPO's rollouts carry their place in the run: TRL's own `AsyncRolloutWorker`, in its spawned
rollout process, plays a served bundle through corral's environments with a real vLLM server
generating (tests/vllm/async_rollouts.py), and every episode's record names the group TRL put it
in, its index there, the model version TRL generated the group with and the advantage TRL gave it. (The trainer's side of
AsyncGRPO needs CUDA: here the script reads the samples and raises the version as a sync does.)"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from corral.protocol.records import RolloutRecord
from tests.conftest import BUNDLES, REPO
from tests.vllm.test_colocated_grpo import SOURCE_ROOTS

pytestmark = [pytest.mark.vllm, pytest.mark.trl, pytest.mark.timeout(1200)]


def test_async_grpo_records_name_the_group_index_and_policy_version_trl_gave_each_rollout(
    vllm_venv_python: str, vllm_url: str, vllm_model_dir: Path, serve, tmp_path: Path
) -> None:
    bundle = serve(BUNDLES / "gridsim", max_concurrent_envs=4)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / root) for root in SOURCE_ROOTS)}
    done = subprocess.run(
        [
            vllm_venv_python,
            str(REPO / "tests/vllm/async_rollouts.py"),
            bundle.url,
            vllm_url,
            str(vllm_model_dir),
            str(tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        env=environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    records = [
        RolloutRecord.model_validate_json(line)
        for file in Path(result["records"]).glob("*/rollouts-*.jsonl")
        for line in file.read_text().splitlines()
    ]
    by_group: dict[int, list[RolloutRecord]] = defaultdict(list)
    for record in records:
        by_group[record.group].append(record)  # type: ignore[index]
    task_of_prompt = {prompt: task for task, prompt in result["tasks"].items()}

    samples = result["samples"]
    assert {sample["model_version"] for sample in samples} == {3, 7}  # groups made before and after a sync
    for sample in samples:  # TRL's sample and corral's record of the same rollout agree on its place
        members = by_group[sample["group"]]
        assert sorted(record.group_index for record in members) == [0, 1], members
        assert {record.policy_version for record in members} == {sample["model_version"]}
        assert {record.step for record in members} == {sample["model_version"]}
        assert {record.task_id for record in members} == {task_of_prompt[sample["prompt"]]}
        assert all(record.status is not None and record.episode_id for record in members)
        assert round(sample["advantage"], 6) in {round(record.advantage, 6) for record in members}  # type: ignore[arg-type]
    assert len({record.run for record in records}) == 1  # the environments' records are one run
