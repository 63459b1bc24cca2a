"""The wire protocol between a corral server and its clients (OpenEnv 0.10's `/ws` frames).

Frames are JSON objects with a `type`. Client -> server: `reset`, `step`, `state`, `close`,
`mcp`. Server -> client: `observation`, `state`, `mcp`, `error`. The server validates every
incoming frame against these models; the client builds its frames from them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

END_TURN = "end_turn"
EPISODE_ENDED = "The episode has ended."


class ErrorCode(StrEnum):
    """OpenEnv's error codes, as sent in `error` frames."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"
    UNAUTHORIZED = "UNAUTHORIZED"


class ToolSpec(BaseModel):
    """A tool as offered to the agent: its name, description and JSON Schema of arguments."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(alias="inputSchema")

    def as_mcp(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}

    def as_openenv(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


END_TURN_TOOL = ToolSpec(
    name=END_TURN,
    description=(
        "End your turn with your reply to the user. Answers with the next turn's prompt, "
        "or says that the episode has ended."
    ),
    input_schema={
        "type": "object",
        "properties": {"response": {"type": "string", "description": "Your reply for this turn."}},
        "required": ["response"],
    },
)


class Toolset(BaseModel):
    """The tools one kind of task offers its agent; one environment class per toolset."""

    name: str
    env: str
    tools: list[ToolSpec]  # the env tools offered, then end_turn


class TaskInfo(BaseModel):
    """One task of a split, as the Task API serves it and a dataset row is built from it."""

    task_id: str
    split: str
    index: int
    toolset: str
    system_prompt: str
    prompt: str
    scores: list[str]


# Client -> server frames ----------------------------------------------------------------


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetData(BaseModel):
    """What a reset plays: a task by split and index (checked against task_id), or by task_id.

    Extra keys (a dataset row's `prompt`, OpenEnv's `seed`, ...) are accepted and ignored.
    """

    model_config = ConfigDict(extra="ignore")

    split: str | None = None
    index: int | None = Field(default=None, ge=0)
    task_id: str | None = None
    episode_id: str | None = None
    tool_timeout_s: float | None = Field(default=None, gt=0)
    reset_timeout_s: float | None = Field(default=None, gt=0)


class ResetFrame(_Frame):
    type: Literal["reset"]
    data: ResetData = Field(default_factory=ResetData)


class ListToolsAction(_Frame):
    type: Literal["list_tools"]
    metadata: dict[str, Any] = Field(default_factory=dict)


class CallToolAction(_Frame):
    type: Literal["call_tool"]
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class StepFrame(_Frame):
    type: Literal["step"]
    data: ListToolsAction | CallToolAction = Field(discriminator="type")


class StateFrame(_Frame):
    type: Literal["state"]


class CloseFrame(_Frame):
    type: Literal["close"]


class McpFrame(_Frame):
    type: Literal["mcp"]
    data: dict[str, Any]


ClientFrame = ResetFrame | StepFrame | StateFrame | CloseFrame | McpFrame
CLIENT_FRAME_TYPES = ("reset", "step", "state", "close", "mcp")


# Server -> client payloads ----------------------------------------------------------------


class ToolError(BaseModel):
    """A framework-level tool failure (OpenEnv's `ToolError`); the tool's own errors are results."""

    error_type: Literal["execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"]
    message: str


class Outcome(BaseModel):
    """How an episode ended: its scores, or why it is unscored."""

    status: Literal["scored", "error"]
    scores: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
