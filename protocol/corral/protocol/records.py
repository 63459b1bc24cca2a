"""Episode records: what happened in each episode, kept to read, filter and train on later.

Two sides, joined by the episode's id (a client sends its own in the reset, `ResetData.episode_id`):

- the server's `EpisodeRecord`: the task, its prompts and tools, every call with its arguments,
  its result or error and its timing, how the episode ended and why, the scores and reward,
  the sandbox and the seconds by phase (`corral serve --record DIR`);
- the client's `RolloutRecord`: what only a trainer knows, the token ids the model saw and
  sampled, their logprobs and the loss mask (`CorralRollout(record_dir=DIR)`, `corral eval`).

Both are written by `corral.protocol.record_store` as JSON lines with an SQLite index, and read
back with its `EpisodeStore`.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.protocol.catalog import ToolSpec
from corral.protocol.frames import CallToolObservation, ToolError
from corral.protocol.outcomes import EpisodeStatus

RecordKind = Literal["episodes", "rollouts"]


class _Record(BaseModel):
    # Logprobs a generator did not compute are NaN: written as JSON's NaN, read back as NaN.
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="constants")


class RecordedCall(_Record):
    """One call the agent made, as the server answered it.

    `turn` is the turn it was made in; `started_s` the seconds from the episode's reset to the
    call; `seconds` how long it took (an `end_turn` that scores includes the verifiers)."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    error: ToolError | None = None
    prompt: str | None = None  # end_turn: the next turn's prompt
    turn: int = 1
    started_s: float = 0.0
    seconds: float = 0.0

    @classmethod
    def of(
        cls,
        tool: str,
        arguments: dict[str, Any],
        observed: CallToolObservation,
        *,
        turn: int,
        started_s: float,
        seconds: float,
    ) -> RecordedCall:
        result = None if observed.error is not None else observed.answer
        return cls(
            tool=tool,
            arguments=arguments,
            result=result,
            error=observed.error,
            prompt=observed.prompt,
            turn=turn,
            started_s=round(started_s, 6),
            seconds=round(seconds, 6),
        )


class EpisodeRecord(_Record):
    """One episode as the server played it, from its reset to its end.

    `status` is scored, failed (by the agent: `reward` is the task's failure score) or unscored
    (the platform failed: `reward` is None); `cause` says what ended it in a word and `reason`
    in a sentence. `seconds` is by phase: start (the sandbox), reset (all of it), tools,
    verify, total.

    What a Python verifier needs to score it again (`corral rescore`): `report`, the env's final
    report exactly as the verifiers scored it (None when it gave none, or past REPORT_KEPT_BYTES of
    JSON, which `report_left_out` then says), and `verifier_digests`, each score id's verifier
    file as `sha256:<hex>`, so that a re-score tells an old verifier from a new one."""

    episode_id: str
    run: str = ""
    session_id: str = ""
    bundle: str = ""
    task_id: str
    split: str | None = None
    system_prompt: str = ""
    prompt: str = ""
    tools: list[ToolSpec] = Field(default_factory=list)
    turns: int = 1
    calls: list[RecordedCall] = Field(default_factory=list)
    tool_calls: int = 0  # calls the env ran (end_turn and refused calls are not counted)
    status: EpisodeStatus = "unscored"
    cause: str  # one of outcomes.CAUSES; read as text, so that another version's records still load
    reason: str | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    reward: float | None = None
    sandbox: str = ""
    seconds: dict[str, float] = Field(default_factory=dict)
    started_at: float = Field(default_factory=time.time)  # wall clock, seconds since the epoch
    ended_at: float = Field(default_factory=time.time)
    report: dict[str, Any] | None = None
    report_left_out: str | None = None  # why `report` is None though the env gave one
    verifier_digests: dict[str, str] = Field(default_factory=dict)


REPORT_KEPT_BYTES = 256 * 1024  # a report larger than this (as JSON) is not kept in its record

RescoreStatus = Literal["rescored", "failed", "refused"]


class RescoreRecord(_Record):
    """One episode scored again by `corral rescore`, kept beside its record (never over it).

    `status` is rescored (`scores` and `reward` are the new verifiers'), failed (a verifier
    raised or ran out of time: `reason` says how) or refused (the episode cannot be scored again
    from its record: `reason` says why). `verifier_digests` names the verifiers that scored it,
    each score id's as `sha256:<hex>`; `old_reward` is the record's, and `changed` says whether
    the new reward differs from it."""

    episode_id: str
    run: str = ""
    task_id: str
    bundle: str = ""
    status: RescoreStatus
    reason: str | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    reward: float | None = None
    old_reward: float | None = None
    changed: bool = False
    verifier_digests: dict[str, str] = Field(default_factory=dict)
    rescored_at: float = Field(default_factory=time.time)


class TrainingContext(_Record):
    """Where a rollout sits in a training run: the trainer's global `step` when it was generated,
    its `group` (the rows the trainer sampled together for one prompt, numbered within the step)
    and its `group_index` in it, the `policy_version` (the step whose weights generated it), and
    its `advantage` when the trainer computes one. An eval's `step` is its checkpoint's."""

    step: int | None = None
    group: int | None = None
    group_index: int | None = None
    policy_version: int | None = None
    advantage: float | None = None


class RolloutRecord(TrainingContext):
    """One rollout as a trainer (or `corral eval`) played it: the tokens behind the server's record,
    and where it sits in the run (`TrainingContext`).

    `completion_ids[i]` was sampled by the model where `env_mask[i]` is 1, with `logprobs[i]`
    (NaN when not computed), and rendered from the server's answer where it is 0.
    `prompt_ids + completion_ids` decodes to the chat template's rendering of `messages`."""

    episode_id: str
    run: str = ""
    task_id: str
    split: str | None = None
    toolset: str = ""
    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    env_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    reward: float | None = None
    status: EpisodeStatus | None = None
    reason: str | None = None
    truncated: str | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    ended_at: float = Field(default_factory=time.time)

    @property
    def sampled(self) -> int:
        """How many ids the model sampled."""
        return sum(self.env_mask)


RunKind = Literal["training", "eval", "served"]


class RunHeader(_Record):
    """What a run is, written as `run.json` in its folder when it starts (and again when it ends):
    its kind, the model, bundle and split, the trainer's key settings (`output_dir` among them, so
    that an eval of one of its checkpoints joins it), and, for an eval of a checkpoint, the
    checkpoint's step. Folders written before headers have none; the viewer shows them unlabelled."""

    run: str
    kind: RunKind
    model: str = ""
    bundle: str = ""
    split: str | None = None
    step: int | None = None  # an eval's checkpoint step
    settings: dict[str, Any] = Field(default_factory=dict)
    started_at: float = Field(default_factory=time.time)
    ended_at: float | None = None
