"""`activation_checkpointing(...)`: the setting under the name the installed transformers knows,
`activation_checkpointing` from 5.20 and `gradient_checkpointing` before (vLLM 0.32 pins
transformers below 5.20, and a venv shared with it must still run the recipes' `--tiny` mode)."""

from __future__ import annotations

import dataclasses
import os

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

from trl import GRPOConfig

from corral.training.presets import activation_checkpointing

pytestmark = pytest.mark.trl


@pytest.mark.parametrize("enabled", [True, False])
def test_the_setting_turns_checkpointing_on_or_off_in_the_installed_transformers(enabled: bool, tmp_path) -> None:
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **activation_checkpointing(enabled))
    assert config.gradient_checkpointing is enabled  # TRL's default is on: the setting took


def test_a_transformers_without_the_new_name_gets_the_old_one() -> None:
    @dataclasses.dataclass
    class TrainingArgumentsBefore520:  # transformers 5.19's fields, as far as checkpointing goes
        gradient_checkpointing: bool = False
        gradient_checkpointing_kwargs: dict | None = None

    assert activation_checkpointing(True, TrainingArgumentsBefore520) == {"gradient_checkpointing": True}
