"""Fixtures of the end-to-end tests: a tiny model (fresh weights, no lessons) and its tokenizer,
made once per module. A module that needs a taught model overrides `model_dir`."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from corral.training.tiny import make_tiny_model  # imported here: collecting needs no torch

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def grpo_run(tmp_path_factory: pytest.TempPathFactory):
    """A real tiny GRPO run through a served bundle, both sides recorded (see `grpo_run.py`)."""
    from tests.e2e.grpo_run import record_grpo_run

    return record_grpo_run(tmp_path_factory.mktemp("grpo-run"))
