"""The wire protocol between a corral server and its clients: OpenEnv 0.10's `/ws` frames.

Every frame, both ways, is a model here; the server builds its replies from them and the
client parses them with them (`CLIENT_FRAMES`, `SERVER_FRAMES`: one union each, on `type`).

    client -> server   reset | step (list_tools, call_tool) | state | close | mcp (JSON-RPC)
    server -> client   observation | state | mcp | error | model_request (relay: harness/relay_frames.py)

An observation travels as OpenEnv serialises it: `{"observation": {...}, "reward", "done"}`,
plus `metadata` beside them when there is any. Its fields are one of three models: the
`ResetObservation` that opens an episode, the `ListToolsObservation`, and the
`CallToolObservation` every tool call (and `end_turn`) answers with. `/schema` is generated
from these models (`schemas()`).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
)
from pydantic_core import to_json

from corral.protocol.catalog import ToolSpec
from corral.protocol.harness.relay_frames import ModelRequest
from corral.protocol.outcomes import EpisodeStatus

EPISODE_ENDED = "The episode has ended."
DEFAULT_TOOL_TIMEOUT_S = 60.0
DEFAULT_RESET_TIMEOUT_S = 600.0
# A failure after the agent has acted is judged by replaying the task untouched first (the
# server's endings.py): a reset and a verification, each within the reset deadline. A step's
# reply may take that much longer than the step's own deadline.
REPLAY_RESET_DEADLINES = 2
STEP_REWARD = 0.0  # the reward of every step that does not end its episode (OpenEnv's graders want a number)


class ErrorCode(StrEnum):
    """OpenEnv's error codes, as sent in `error` frames."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Limits(_Strict):
    """The deadlines and turns an episode plays under: the operator's, or lower ones its client
    asked for. `max_turns`: in a reset's answer, this episode's (at its last turn's end the
    server scores what the agent left); in /metadata, the most any of the server's tasks plays;
    None from a server older than it."""

    tool_timeout_s: float
    reset_timeout_s: float
    max_turns: int | None = Field(default=None, ge=1)
    # A harness episode's: how long run_agent's agent may run (its env's [harness] timeout_s).
    agent_timeout_s: float | None = None


# Client -> server -----------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number of seconds")
    return value


class ResetData(BaseModel):
    """What a reset plays: a task by split and index (checked against task_id), by task_id, or
    by `seed` (a task of the split, picked deterministically). The limits a client sends may
    only lower the server's. Extra keys (a dataset row's `prompt`, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    split: str | None = None
    index: int | None = Field(default=None, ge=0)
    task_id: str | None = None
    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, min_length=1, max_length=255)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    reset_timeout_s: float | None = Field(default=None, gt=0)
    max_turns: int | None = Field(default=None, ge=1)
    # A harness episode's engine (run_agent): where its model calls go, and the training policy's temperature.
    llm_url: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    temperature: float | None = Field(default=None, gt=0)
    llm: Literal["relay"] | None = None  # "relay": this socket's client answers the agent's model calls

    _check_finite = field_validator("tool_timeout_s", "reset_timeout_s", "temperature")(_finite)


class ResetRequest(_Strict):
    type: Literal["reset"] = "reset"
    data: ResetData = Field(default_factory=ResetData)


class ListTools(_Strict):
    """OpenEnv's `ListToolsAction`."""

    type: Literal["list_tools"] = "list_tools"
    metadata: dict[str, Any] = Field(default_factory=dict)


class CallTool(_Strict):
    """OpenEnv's `CallToolAction`."""

    type: Literal["call_tool"] = "call_tool"
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


StepAction = Annotated[ListTools | CallTool, Field(discriminator="type")]


class StepRequest(_Strict):
    type: Literal["step"] = "step"
    data: StepAction


class StateRequest(_Strict):
    type: Literal["state"] = "state"


class CloseRequest(_Strict):
    type: Literal["close"] = "close"


class McpRequest(_Strict):
    """A JSON-RPC 2.0 request for the session (`tools/list`, `tools/call`, ...); the server
    checks it as JSON-RPC (`JsonRpcRequest`), so a bad one gets a JSON-RPC error."""

    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]


ClientFrame = Annotated[
    ResetRequest | StepRequest | StateRequest | CloseRequest | McpRequest, Field(discriminator="type")
]
CLIENT_FRAMES: TypeAdapter[ClientFrame] = TypeAdapter(ClientFrame)
CLIENT_FRAME_TYPES = ("reset", "step", "state", "close", "mcp")


# Observations -----------------------------------------------------------------------------------


class ToolError(_Strict):
    """Why a tool call failed (OpenEnv's `ToolError`); the message is what the model reads."""

    error_type: Literal["execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"]
    message: str


class Observation(_Strict):
    """OpenEnv's `Observation`: every observation has these; `reward` and `done` travel beside
    the other fields, on the envelope."""

    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class _Ending(BaseModel):
    """How an episode ended, on the observation that ends it: scored (the reward is the
    verifiers'), failed (by the agent: the task's failure score, `reason` says why), or unscored
    (by the platform: `reward` null, `reason` says why)."""

    status: EpisodeStatus | None = None
    scores: dict[str, float] | None = None
    reason: str | None = None


class ResetObservation(Observation, _Ending):
    """The first turn: what the agent is told and offered, and the limits in force."""

    task_id: str
    episode_id: str
    system_prompt: str = ""
    prompt: str = ""
    turn: int = 1
    offered_tools: list[ToolSpec] = Field(default_factory=list)
    limits: Limits | None = None
    failure_score: float | None = None  # what an ending the agent causes scores: the task's


class ListToolsObservation(Observation):
    tools: list[ToolSpec]


class CallToolObservation(Observation, _Ending):
    """A tool's answer; for `end_turn`, the next turn's prompt (also in `result`), or the end."""

    tool_name: str
    result: Any = None
    error: ToolError | None = None
    prompt: str | None = None
    turn: int | None = None

    @property
    def answer(self) -> str:
        """What the model reads: the tool's text, or why it failed."""
        if self.error is not None:
            return self.error.message
        return self.result if isinstance(self.result, str) else ("" if self.result is None else str(self.result))


StepObservation = ListToolsObservation | CallToolObservation
ObservationT = TypeVar("ObservationT", bound=Observation)


def _json(value: Any) -> str:
    """`value` as a model's field of type Any serialises it (a non-finite float is null)."""
    return to_json(value, inf_nan_mode="null").decode()


# An observation's fields that travel beside it, not in it (a set: pydantic's `exclude` takes one).
ENVELOPE: set[str] = {"reward", "done"}


class ObservationData(BaseModel):
    """An observation frame's `data`, in OpenEnv's shape (`serialize_observation`)."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None

    @classmethod
    def of(cls, observation: Observation) -> ObservationData:
        fields = observation.model_dump(mode="json", exclude=ENVELOPE)
        return cls(
            observation=fields, reward=observation.reward, done=observation.done, metadata=observation.metadata or None
        )

    @model_serializer(mode="wrap")
    def _metadata_only_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped = handler(self)
        if not dumped.get("metadata"):
            dumped.pop("metadata", None)
        return dumped

    def parse(self, model: type[ObservationT]) -> ObservationT:
        """The observation as `model` (what the request that it answers asked for)."""
        return model.model_validate({**self.observation, "reward": self.reward, "done": self.done})


class EpisodeState(BaseModel):
    """OpenEnv's `State`: `step_count` counts every step frame since the reset."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    turn: int | None = None
    done: bool = False
    status: EpisodeStatus | None = None
    reason: str | None = None


# Server -> client -----------------------------------------------------------------------------


class ObservationReply(_Strict):
    type: Literal["observation"] = "observation"
    data: ObservationData

    @classmethod
    def of(cls, observation: Observation) -> ObservationReply:
        return cls(data=ObservationData.of(observation))


class StateReply(_Strict):
    type: Literal["state"] = "state"
    data: EpisodeState


class McpReply(_Strict):
    type: Literal["mcp"] = "mcp"
    data: JsonRpcResponse


class ErrorData(BaseModel):
    """An error frame's `data`: OpenEnv's `message` and `code`, and what else helps (the
    capacity's `active_sessions` and `max_sessions`, a validation's `errors`)."""

    model_config = ConfigDict(extra="allow")

    message: str
    code: ErrorCode


class ErrorReply(_Strict):
    type: Literal["error"] = "error"
    data: ErrorData

    @classmethod
    def of(cls, code: ErrorCode, message: str, **extra: Any) -> ErrorReply:
        return cls(data=ErrorData(message=message, code=code, **extra))


# JSON-RPC 2.0, as `mcp` frames and POST /mcp carry it -------------------------------------------


class JsonRpcRequest(_Strict):
    jsonrpc: Literal["2.0"]
    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    id: int | str | None = None


class JsonRpcError(BaseModel):
    code: int
    message: str
    data: Any = None


class JsonRpcResponse(BaseModel):
    """A result or an error (never both), answering the request with `id`."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: int | str | None = None
    result: Any = None
    error: JsonRpcError | None = None

    @model_serializer(mode="wrap")
    def _result_or_error(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped = handler(self)
        dumped.pop("result" if self.error is not None else "error", None)
        return dumped


# corral's JSON-RPC method: copies of the caller's episode at its current turn, each on a new
# session (`params.n` of them); the result is `{"session_ids": [...], "episode_ids": [...]}`.
FORK_METHOD = "corral/episode/fork"


class ForkRefusal(StrEnum):
    """Why a fork was refused: the `code` in its JSON-RPC error's `data` (docs/protocol.md)."""

    FORK_UNSUPPORTED = "FORK_UNSUPPORTED"  # the task's env declares no fork mode
    REPLAY_MISMATCH = "REPLAY_MISMATCH"  # a replayed call answered otherwise than the record
    CAPACITY_REACHED = "CAPACITY_REACHED"  # fewer sessions free than copies asked
    NO_EPISODE = "NO_EPISODE"  # nothing to fork: no episode, or one that has ended
    FORK_FAILED = "FORK_FAILED"  # a copy's sandbox could not start (the platform's failure)


ServerFrame = Annotated[
    ObservationReply | StateReply | McpReply | ErrorReply | ModelRequest, Field(discriminator="type")
]
SERVER_FRAMES: TypeAdapter[ServerFrame] = TypeAdapter(ServerFrame)


def schemas() -> dict[str, Any]:
    """`GET /schema`, as OpenEnv's validator reads it: JSON Schemas of the step action, of every
    step's observation and of the reset's (each with `reward` and `done`), and of the state."""
    # Observations name fields as OpenEnv does (not by alias), as they are sent.
    return {
        "action": TypeAdapter(StepAction).json_schema(),
        "observation": TypeAdapter(StepObservation).json_schema(by_alias=False, mode="serialization"),
        "reset_observation": ResetObservation.model_json_schema(by_alias=False, mode="serialization"),
        "state": EpisodeState.model_json_schema(by_alias=False, mode="serialization"),
    }
