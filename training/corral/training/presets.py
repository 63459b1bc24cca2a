"""Named training algorithms, each mapped to the TRL config and trainer that run it.

    from corral.training.presets import preset
    p = preset("dapo")
    trainer = p.trainer(model=..., args=p.config(output_dir="out", max_steps=100),
                        train_dataset=env.dataset, environment_factory=env.factory)

A preset sets only what defines the algorithm (the loss, the clip range, the advantage's
scaling, the KL term), with the paper's values; everything about the machine and the run
(batch sizes, lengths, precision, vLLM, logging) is the caller's, as keyword overrides, and an
override wins over the preset. Each preset's `reason` says what the algorithm changes and why
its settings follow. The settings are fields of TRL 1.16's configs (trl/trainer/grpo_config.py,
sft_config.py, experimental/gmpo), read by its loss code (`GRPOTrainer._compute_loss`).

With one optimisation pass per generated batch (TRL's default: `num_iterations=1` and
`steps_per_generation == gradient_accumulation_steps`) the policy that sampled a batch is the
one being trained, every importance ratio is exactly 1, and the clip-based presets differ only in
how they normalise the loss and scale the advantage. Their clip ranges act once updates go
off-policy: `num_iterations > 1` or `steps_per_generation > gradient_accumulation_steps`. (With
vLLM the ratio's old log-probabilities are still the trainer's own; vLLM's sampling mismatch is
corrected apart from the clip, by `vllm_importance_sampling_correction`.)
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from corral.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from transformers import TrainingArguments


@dataclass(frozen=True)
class Preset:
    """An algorithm: the TRL config and trainer classes that run it, and the settings it needs.

    Attributes:
        name: Canonical name, e.g. `dr_grpo`.
        summary: One line: what the algorithm is.
        reason: What the algorithm changes and why each setting follows, citing the paper.
        paper: Link to the paper the settings come from.
        settings: Config fields the preset sets; `config()` lays the caller's overrides over them.
        config_class: Where the config class lives, as `module:Class` (imported on first use).
        trainer_class: Where the trainer class lives, as `module:Class` (imported on first use).
    """

    name: str
    summary: str
    reason: str
    paper: str
    settings: Mapping[str, Any]
    config_class: str = "trl:GRPOConfig"
    trainer_class: str = "trl:GRPOTrainer"

    def __post_init__(self) -> None:
        # Read-only: every caller shares the preset, so one caller's change must not reach another.
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    def config(self, output_dir: str, **overrides: Any) -> TrainingArguments:
        """The TRL config running this algorithm: the preset's settings, then `overrides` over them.

        Args:
            output_dir: Where the trainer writes checkpoints and logs.
            **overrides: Any field of the config class (batch sizes, `max_steps`, `use_vllm`, ...),
                including one the preset sets: the caller's value wins.

        Example:
            `preset("gspo").config(output_dir="out", steps_per_generation=4, epsilon=1e-3)`
        """
        return _load(self.config_class)(output_dir=output_dir, **{**self.settings, **overrides})

    @property
    def trainer(self) -> type:
        """The TRL trainer class to pair the config with (`GRPOTrainer`, `SFTTrainer`, ...)."""
        return _load(self.trainer_class)


def preset(name: str) -> Preset:
    """The preset called `name`, matched ignoring case, `-`, `_`, `.` and spaces (`Dr. GRPO`).

    Raises:
        ConfigError: no preset has that name; the message lists the known ones.
    """
    found = _BY_KEY.get(_key(name))
    if found is None:
        raise ConfigError(f"no training preset is called {name!r}; the known presets are: {', '.join(PRESETS)}")
    return found


def activation_checkpointing(enabled: bool, config_class: type[DataclassInstance] | None = None) -> dict[str, bool]:
    """The config setting that turns activation checkpointing on or off, under the name
    `config_class` knows (by default transformers' `TrainingArguments`, which every TRL config
    extends): `activation_checkpointing` from transformers 5.20, `gradient_checkpointing` before
    (vLLM 0.32 pins transformers below 5.20), where the new name is refused.

        GRPOConfig(output_dir="out", **activation_checkpointing(True))
    """
    from dataclasses import fields

    if config_class is None:
        from transformers import TrainingArguments

        config_class = TrainingArguments

    known = {field.name for field in fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in known else "gradient_checkpointing": enabled}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _prose(text: str) -> str:
    """A paragraph written across source lines, as one line."""
    return " ".join(text.split())


def _load(path: str) -> type:
    """`module:Class`, imported now: TRL loads in seconds and its experimental trainers warn on
    import, so only the preset a caller uses pays for its classes."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


_PRESETS = [
    Preset(
        name="grpo",
        summary="Group Relative Policy Optimization as introduced in DeepSeekMath.",
        paper="https://huggingface.co/papers/2402.03300",
        reason=_prose("""
            GRPO (Shao et al. 2024, DeepSeekMath) drops PPO's value model: each rollout's
            advantage is its reward minus its group's mean reward, divided by the group's
            standard deviation (scale_rewards='group'). The PPO-clipped token losses are
            averaged over each completion, then over completions (loss_type='grpo'), and a
            KL penalty to the initial model keeps the policy close (beta=0.04, the paper's
            KL coefficient; it loads a second copy of the model as the reference: override
            beta=0.0 to drop it). epsilon=0.2 is PPO's clip range.
        """),
        settings={"loss_type": "grpo", "scale_rewards": "group", "beta": 0.04, "epsilon": 0.2},
    ),
    Preset(
        name="dr_grpo",
        summary="Dr. GRPO: GRPO without its length and difficulty biases.",
        paper="https://huggingface.co/papers/2503.20783",
        reason=_prose("""
            Dr. GRPO (Liu et al. 2025, Understanding R1-Zero-Like Training) finds two biases
            in GRPO and removes them. Averaging each completion's token losses over its own
            length favours short right answers and long wrong ones: loss_type='dr_grpo' sums
            token losses and divides by a constant (batch size x max_completion_length).
            Dividing advantages by the group's reward std up-weights questions that are too
            easy or too hard: scale_rewards='none' keeps the plain reward minus group mean.
            The paper trains without a KL term (beta=0.0).
        """),
        settings={"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0},
    ),
    Preset(
        name="dapo",
        summary="DAPO: clip-higher, token-level loss, overlong filtering, no KL.",
        paper="https://huggingface.co/papers/2503.14476",
        reason=_prose("""
            DAPO (Yu et al. 2025) keeps GRPO's group-normalised advantage and changes the
            update. Clip-higher: a wider upper clip (epsilon=0.2, epsilon_high=0.28, paper
            section 4.1) lets unlikely tokens gain probability, which keeps entropy from
            collapsing. Token-level loss (loss_type='dapo'): token losses are normalised by
            the number of active tokens in the batch, so long completions weigh in by their
            length. Overlong filtering (mask_truncated_completions=True): completions cut
            off at max_completion_length are left out of the loss instead of being punished
            for a length they did not choose. No KL term (beta=0.0, section 2.3). Not in TRL
            1.16: dynamic sampling (resampling groups whose rewards are all equal; the
            rollout accounting logs how many there are) and the soft overlong punishment
            (trl.rewards.get_soft_overlong_punishment, as a reward function of your own).
        """),
        settings={
            "loss_type": "dapo",
            "epsilon": 0.2,
            "epsilon_high": 0.28,
            "mask_truncated_completions": True,
            "beta": 0.0,
        },
    ),
    Preset(
        name="gspo",
        summary="GSPO: one length-normalised importance ratio per sequence, clipped tightly.",
        paper="https://huggingface.co/papers/2507.18071",
        reason=_prose("""
            GSPO (Zheng et al. 2025, Qwen) argues that the reward is given per sequence, so
            the importance ratio should be too: importance_sampling_level='sequence' uses
            the geometric mean of the token ratios (exp of the mean log-ratio) for the whole
            sequence, and loss_type='grpo' averages per sequence, which with sequence ratios
            is the paper's per-sequence objective (TRL warns that token-summing losses are
            not). A sequence-level ratio moves far less than a token's, so the clip range is
            tiny: epsilon=3e-4, epsilon_high=4e-4 (paper v2, section 5.1). No KL term
            (beta=0.0). The clip only acts off-policy: the paper splits each rollout batch
            into 4 minibatches (steps_per_generation = 4 x gradient_accumulation_steps), a
            batch setting left to you; with one update per batch GSPO's gradient equals
            GRPO's sequence-averaged one.
        """),
        settings={
            "importance_sampling_level": "sequence",
            "loss_type": "grpo",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
            "beta": 0.0,
        },
    ),
    Preset(
        name="cispo",
        summary="CISPO: clip the importance weight, not the update; every token keeps a gradient.",
        paper="https://huggingface.co/papers/2506.13585",
        reason=_prose("""
            CISPO (MiniMax-M1, 2025) observes that PPO's clip drops the gradient of exactly
            the rare, high-ratio tokens (reflective 'forks' like 'However') that RL should
            strengthen. loss_type='cispo' instead multiplies each token's log-probability by
            its importance weight clipped from above and detached, so every token
            contributes; epsilon_high is that clip (the weight's maximum). The values follow
            ScaleRL (Khatri et al. 2025, https://huggingface.co/papers/2510.13786), whose
            large-scale recipe adopts CISPO: epsilon_high=5.0 and advantages scaled by the
            batch's reward std (scale_rewards='batch'). No KL term (beta=0.0).
        """),
        settings={"loss_type": "cispo", "epsilon_high": 5.0, "scale_rewards": "batch", "beta": 0.0},
    ),
    Preset(
        name="sapo",
        summary="SAPO: a smooth, temperature-controlled gate instead of a hard clip.",
        paper="https://huggingface.co/papers/2511.20347",
        reason=_prose("""
            SAPO (Gao et al. 2025, Qwen) replaces the hard clip band, which zeroes a token's
            gradient the moment its ratio leaves it, with a sigmoid gate of the ratio
            (loss_type='sapo'): updates fade smoothly as the policy drifts off the sampling
            policy. Negative-advantage tokens are gated more sharply
            (sapo_temperature_neg=1.05 against sapo_temperature_pos=1.0, the paper's
            values), since pushing probability down spreads it over the whole vocabulary and
            destabilises training more. Advantages are group-normalised as in GRPO
            (scale_rewards='group'); no KL term (beta=0.0).
        """),
        settings={
            "loss_type": "sapo",
            "sapo_temperature_pos": 1.0,
            "sapo_temperature_neg": 1.05,
            "scale_rewards": "group",
            "beta": 0.0,
        },
    ),
    Preset(
        name="gmpo",
        summary="GMPO: maximise the geometric mean of the token ratios (TRL's experimental GMPO).",
        paper="https://huggingface.co/papers/2507.20673",
        reason=_prose("""
            GMPO (Zhao et al. 2025) maximises the geometric mean of the per-token importance
            ratios instead of their arithmetic mean, so one outlier token cannot swing the
            sequence's update; that stability allows a much wider clip, applied to the
            log-ratios: epsilon=0.4 and epsilon_high=0.4 keep ratios in (exp(-0.4),
            exp(0.4)), the paper's recommendation. The loss is GMPO's own
            (trl.experimental.gmpo), so loss_type does not apply. No KL term (beta=0.0). The
            trainer is corral.training.gmpo.GMPOTrainer: TRL's, called like GRPOTrainer
            (reward_funcs optional, as an environment's get_reward is the reward).
        """),
        settings={"epsilon": 0.4, "epsilon_high": 0.4, "beta": 0.0},
        config_class="trl.experimental.gmpo:GMPOConfig",
        trainer_class="corral.training.gmpo:GMPOTrainer",
    ),
    Preset(
        name="reinforce",
        summary="REINFORCE with the group's mean reward as baseline (RLOO up to a constant).",
        paper="https://huggingface.co/papers/2402.14740",
        reason=_prose("""
            Ahmadian et al. 2024 (Back to Basics) show that for LLMs plain REINFORCE with a
            sampled baseline matches or beats PPO. In TRL terms: one optimisation pass per
            generated batch (num_iterations=1; keep steps_per_generation equal to
            gradient_accumulation_steps, TRL's default), so every importance ratio is
            exactly 1 and PPO's clip never acts; advantages are the reward minus the group's
            mean, unscaled (scale_rewards='none'), which is RLOO's leave-one-out advantage
            times (G-1)/G for a group of G; token log-probabilities are summed per sequence
            and divided by a constant (loss_type='dr_grpo'), so each sequence's weight is
            its reward advantage, not its length; no KL term (beta=0.0). The gradient is
            then the REINFORCE estimator sum_i (r_i - mean r) grad log p(y_i) up to a
            constant factor. These are dr_grpo's settings with the single pass pinned, and
            on-policy the two updates are the same (Dr. GRPO's objective is this estimator
            plus PPO's clip for off-policy updates): choose reinforce to say the run stays
            on-policy. TRL's RLOOTrainer would be the literal choice, but in TRL 1.16 it
            takes no environment_factory.
        """),
        settings={
            "num_iterations": 1,
            "scale_rewards": "none",
            "loss_type": "dr_grpo",
            "beta": 0.0,
        },
    ),
    Preset(
        name="sft",
        summary="Supervised warm start on gold conversations, loss on the model's turns only.",
        paper="https://huggingface.co/papers/2501.12948",
        reason=_prose("""
            DeepSeek-R1 (2025) fine-tunes on a little curated data ('cold start') before RL
            so that the policy starts from answers in the right format; here, tool calls the
            server parses, so that GRPO's first groups have rewards that differ.
            assistant_only_loss=True trains on the assistant turns only: prompts and tool
            results are the environment's text, masked as GRPO masks them (TRL swaps in its
            training chat template, whose {% generation %} markers mark the assistant
            turns). Rows are conversations: `messages`, with the tools offered in a `tools`
            column, as GRPO renders them.
        """),
        settings={"assistant_only_loss": True},
        config_class="trl:SFTConfig",
        trainer_class="trl:SFTTrainer",
    ),
]

PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in _PRESETS})
"""Every preset by canonical name, in a stable order: grpo, dr_grpo, dapo, gspo, cispo, sapo,
gmpo, reinforce, sft."""

_BY_KEY = {_key(name): p for name, p in PRESETS.items()}
