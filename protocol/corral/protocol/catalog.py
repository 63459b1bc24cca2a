"""What a served bundle offers, as its Task API serves it: its splits and tasks, and the tools
each kind of task offers the agent (the `Toolset` an environment class is generated from)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

END_TURN = "end_turn"  # corral's own tool: every task offers it after its env's tools
RUN_AGENT = "run_agent"  # corral's own tool in a harness env's tasks: the agent program runs to its end
# The environment class a client generates for TRL has these methods of its own (TRL calls
# them; every other public method is a tool offered to the model).
ENVIRONMENT_METHODS = frozenset({"reset", "get_reward"})
# What no env's tool may be named (`corral check` refuses it): corral's own tool, and the
# environment class's methods, which such a tool would hide.
RESERVED_TOOL_NAMES = ENVIRONMENT_METHODS | {END_TURN, RUN_AGENT}


class ToolSpec(BaseModel):
    """A tool as offered to the agent: its name, description and JSON Schema of arguments.

    OpenEnv's observations name the schema `input_schema`, MCP's `inputSchema` (`as_mcp`)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(alias="inputSchema")

    @field_validator("description", mode="before")
    @classmethod
    def _no_null(cls, value: Any) -> Any:
        return "" if value is None else value

    def as_mcp(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    def as_chat(self) -> dict[str, Any]:
        """The tool as chat templates take it: `{"type": "function", "function": {...}}`."""
        schema = self.input_schema or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


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


class SplitInfo(BaseModel):
    """One split, as `GET /{env}/splits` lists it: OpenEnv's `{name, type}` and its size."""

    name: str
    type: Literal["train", "validation", "test"]
    num_tasks: int


RUN_AGENT_TOOL = ToolSpec(
    name=RUN_AGENT,
    description=(
        "Run the env's agent program in the sandbox to its end, its model calls going to the engine the "
        "reset named (llm_url, model, temperature); the episode then ends, scored, with the captured calls "
        "in the observation's metadata (capture)."
    ),
    input_schema={"type": "object", "properties": {}},
)
