"""A harness episode's capture: the agent's model calls as the engine answered them.

A harness (a CLI agent in the sandbox) owns its loop; only its model calls leave the sandbox,
through the server's capture proxy, which keeps each call's engine token ids and logprobs
(never re-tokenized: a local chat template matched the engine on 0 of 28 turns, trl#6947).
Here: one call, and the levels a capture reaches. `corral.protocol.harness.graph` places the calls
in a token-prefix graph; `corral.protocol.harness.capture` holds an episode's calls and turns them
into OpenEnv 0.10's `TrainingTrace`.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from corral.errors import ConfigError

# Strongest first. tokens: the engine's prompt and completion ids and one logprob per completion
# token (trainable); logprobs: logprobs without ids; text: the reply alone (an eval episode).
CaptureLevel = Literal["tokens", "logprobs", "text"]
CAPTURE_LEVELS: tuple[CaptureLevel, ...] = get_args(CaptureLevel)

# The sampling that trains the policy: the trainer's temperature, every other knob a no-op, as
# OpenEnv's `training_sampling` pins it (a truncating knob would make the logprobs another
# policy's). The agent's own choices are recorded beside it, never used.
NEUTRAL_SAMPLING: dict[str, float | int] = {
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
}


def weakest(*levels: CaptureLevel) -> CaptureLevel:
    """The weakest of `levels`: a capture is as trainable as its least complete call."""
    return max(levels, key=CAPTURE_LEVELS.index)


class CapturedCall(BaseModel):
    """One model call the engine answered, as the agent sent it and as the engine sampled it.

    `node_id` is given on arrival (`c0`, `c1`, ...); where the call sits in the episode (its
    parent, whether it is a retry or a side call) is the graph's to say, from the ids alone."""

    model_config = ConfigDict(extra="forbid")

    node_id: str = Field(min_length=1)
    request: dict[str, Any]  # the agent's request as it sent it: messages, tools, its sampling
    sampling: dict[str, Any]  # the sampling the engine was asked for (the training policy)
    requested_sampling: dict[str, Any]  # what the agent asked for, recorded, not used
    level: CaptureLevel
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    per_token_logps: list[float] = Field(default_factory=list)
    message: dict[str, Any]  # the assistant message the agent got: content, tool_calls
    finish_reason: str | None = None
    retry_count: int = 0  # the SDK's own count of attempts before this one (x-stainless-retry-count)
    problems: list[str] = Field(default_factory=list)  # why the level is below tokens, in words

    @property
    def offers_tools(self) -> bool:
        return bool(self.request.get("tools"))

    @property
    def text(self) -> str:
        return self.message.get("content") or ""


def training_sampling(temperature: float) -> dict[str, float | int]:
    """The sampling every captured call is pinned to: the trainer's temperature (the one it
    recomputes logprobs at), every other knob neutral."""
    if not math.isfinite(temperature) or temperature <= 0:
        raise ConfigError(
            f"a harness episode's temperature must be a finite number above 0, got {temperature!r}: "
            "pass the trainer's own (GRPOConfig.temperature, 1.0 by default)"
        )
    return {"temperature": float(temperature), **NEUTRAL_SAMPLING}
