"""Every training preset builds a config TRL accepts and trains a step on a tiny model on the CPU:
the RL presets against a live corral server (one server, one model, for all of them), SFT on
conversations with a tool call."""

from __future__ import annotations

import inspect
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("trl")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from corral.client import Bundle
from corral.protocol.record_store import EpisodeStore
from corral.training.presets import PRESETS, preset
from corral.training.tiny import Lesson, make_tiny_model, one_cpu_thread, teach_tool_call
from tests.conftest import FIXTURES, wait_for_no_env_processes
from tests.e2e.support import CPU_RUN

pytestmark = pytest.mark.trl
RL_PRESETS = [name for name in PRESETS if name != "sft"]
GROUP = 4
CALL = {"text": "apple"}  # the toybox task says: "Say apple."; saying it scores 1
# The config field a trainer copies each setting into, where its name differs.
TRAINER_ATTRIBUTE = {"epsilon": "epsilon_low"}
MACHINE_CHOICES = {
    "use_cpu",
    "bf16",
    "fp16",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "steps_per_generation",
    "num_generations",
    "max_completion_length",
    "max_length",
    "use_vllm",
    "vllm_mode",
    "report_to",
    "output_dir",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the server records every episode it plays, with the reward it served."""
    return tmp_path_factory.mktemp("records")


@pytest.fixture(scope="module")
def toybox(records: Path) -> Iterator[Bundle]:
    """The toybox bundle's `toy` split (one task: say apple), served here for the whole module."""
    toybox = FIXTURES / "toybox"
    with Bundle.local(toybox, split="toy", sandbox="local", max_concurrent_envs=GROUP, record_dir=records) as env:
        yield env
    assert wait_for_no_env_processes() == [], "env processes outlived the server"


@pytest.fixture(scope="module")
def tools(toybox: Bundle) -> list[Any]:
    """The env's tools as GRPOTrainer offers them: the factory's public methods, by name."""
    return [
        method
        for name, method in inspect.getmembers(toybox.factory, inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]


@pytest.fixture(scope="module")
def lessons(toybox: Bundle) -> list[Lesson]:
    """The task's prompt, answered with the call that scores 1."""
    return [Lesson(prompt=toybox.dataset[0]["prompt"], tool="say", arguments=CALL)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, lessons: list[Lesson], tools: list[Any]) -> Path:
    """A tiny model taught to answer with the call some of the time, so that rewards in a group
    differ and each preset's loss has advantages to work with (80 steps: about 10 in 16 answers)."""
    model_dir = make_tiny_model(tmp_path_factory.mktemp("presets") / "model")
    teach_tool_call(model_dir, lessons, tools, steps=80)
    return model_dir


def test_an_unknown_preset_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        preset("ppo")

    assert str(refused.value) == (
        "no training preset is called 'ppo'; the known presets are: "
        "grpo, dr_grpo, dapo, gspo, cispo, sapo, gmpo, reinforce, sft"
    )


@pytest.mark.parametrize("spelling", ["dr_grpo", "dr-grpo", "DR_GRPO", "Dr. GRPO", "drgrpo"])
def test_names_match_ignoring_case_and_separators(spelling: str) -> None:
    assert preset(spelling) is PRESETS["dr_grpo"]


def test_overrides_win_over_the_presets_settings(tmp_path: Path) -> None:
    dapo = preset("dapo")

    config = dapo.config(output_dir=str(tmp_path), epsilon_high=0.3, max_steps=7, **CPU_RUN)

    assert (config.epsilon_high, config.max_steps) == (0.3, 7)
    assert config.loss_type == "dapo" and config.mask_truncated_completions is True
    assert dapo.settings["epsilon_high"] == 0.28  # the preset itself is unchanged


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_preset_sets_the_algorithm_and_leaves_the_machine_to_the_caller(name: str) -> None:
    p = preset(name)

    assert p.summary and p.paper.startswith("https://huggingface.co/papers/") and p.reason
    assert not set(p.settings) & MACHINE_CHOICES, f"{name} sets machine choices"


def assert_settings_reached(trainer: Any, settings: dict[str, Any]) -> None:
    """Each setting is what the trainer computes with (its own copy where it keeps one)."""
    for key, value in settings.items():
        attribute = TRAINER_ATTRIBUTE.get(key, key)
        holder = trainer if hasattr(trainer, attribute) else trainer.args
        assert getattr(holder, attribute) == value, f"{key} is {getattr(holder, attribute)!r}"


def recorded_episodes(records: Path) -> dict[str, float | None]:
    """The reward the server served for each episode it recorded, by episode id."""
    with EpisodeStore(records) as store:
        return {row.episode_id: row.reward for row in store.find()}


def served_rewards(records: Path, before: dict[str, float | None], count: int) -> list[float | None]:
    """The rewards of the `count` episodes recorded since `before` (the server writes its records
    off its event loop, so the last may land a moment after the trainer has read its reward)."""
    deadline = time.monotonic() + 10
    while len(new := recorded_episodes(records).keys() - before.keys()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    served = recorded_episodes(records)
    return [served[episode] for episode in new]


def step_log(trainer: Any) -> dict[str, Any]:
    """The one training step's logged metrics."""
    (entry,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    return entry


@pytest.mark.parametrize("name", RL_PRESETS)
def test_each_rl_preset_trains_a_step_against_a_live_server(
    name: str, toybox: Bundle, records: Path, model_dir: Path, tmp_path: Path
) -> None:
    p = preset(name)
    config = p.config(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=48,
        max_tool_calling_iterations=1,
        chat_template_kwargs={"enable_thinking": False},
        **CPU_RUN,
    )
    # Rewards from the server: GRPOTrainer takes no reward function, the environment owns it.
    trainer = p.trainer(
        model=str(model_dir), args=config, train_dataset=toybox.dataset, environment_factory=toybox.factory
    )
    before = recorded_episodes(records)
    with one_cpu_thread():
        trainer.train()

    assert trainer.state.global_step == 1
    log = step_log(trainer)
    assert math.isfinite(log["loss"])
    # The rewards TRL trained on are the ones the server served for the step's episodes (its
    # verifier scores 1 for saying apple, else 0). The taught model says apple in some rollouts,
    # so a client that lost a reward (None, or a 0 in its place) would log another mean.
    served = served_rewards(records, before, GROUP)
    assert len(served) == GROUP and None not in served and sum(served) > 0, served
    assert log[f"rewards/{toybox.factory.__name__}/mean"] == pytest.approx(sum(served) / GROUP)
    assert_settings_reached(trainer, p.settings)
    assert ("kl" in log) == (p.settings["beta"] > 0)  # only a KL preset loads a reference model
    if name == "gmpo":
        from trl.experimental.gmpo import GMPOTrainer

        assert isinstance(trainer, GMPOTrainer)  # GMPO's loss, not GRPO's


def test_the_sft_preset_trains_a_step_on_the_models_turns_only(
    toybox: Bundle, model_dir: Path, lessons: list[Lesson], tools: list[Any], tmp_path: Path
) -> None:
    from datasets import Dataset
    from transformers.utils import get_json_schema

    call = {"type": "function", "function": {"name": "say", "arguments": CALL}}
    conversation = [
        *lessons[0].prompt,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "say", "content": json.dumps({"heard": "apple"})},
        {"role": "assistant", "content": "Done."},
    ]
    schemas = json.dumps([get_json_schema(tool) for tool in tools])  # the tools GRPO offers
    rows = Dataset.from_list([{"messages": conversation, "tools": schemas}] * GROUP)
    p = preset("sft")
    config = p.config(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=GROUP, **CPU_RUN)
    trainer = p.trainer(model=str(model_dir), args=config, train_dataset=rows)
    with one_cpu_thread():
        trainer.train()

    assert trainer.state.global_step == 1
    assert math.isfinite(step_log(trainer)["loss"])
    assert_settings_reached(trainer, p.settings)
    # The loss sees the model's turns only: the prompt and the tool's answer are masked out.
    example = trainer.train_dataset[0]
    labelled = zip(example["input_ids"], example["labels"], strict=True)
    text = trainer.processing_class.decode([token for token, label in labelled if label != -100])
    assert '"apple"' in text and "Done." in text
    assert "heard" not in text and "Say apple" not in text
