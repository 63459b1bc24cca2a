"""`Env`, the class an environment subclasses, and `@tool`, which offers a method to the agent."""

import copy
from collections.abc import Callable
from typing import TypeVar

from corral.env.schema import ToolSchemaError, tool_schema

_F = TypeVar("_F", bound=Callable)
# The runtime's own methods: a tool of the same name would hide one from the server.
_RESERVED = frozenset({"reset", "end_turn", "report", "tool_schemas"})
_SCHEMA_ATTR = "__corral_tool__"


def tool(fn: _F) -> _F:
    """Offer a method to the agent as a tool, described by its type hints and docstring.

    The schema is built here, when the class body runs, so a tool that cannot be described
    fails at import with a ToolSchemaError that says what to fix. The method itself is
    returned unchanged and receives the arguments as JSON gives them (an Enum parameter
    gets its member's value).

        @tool
        def submit_schedule(self, actions: list[int]) -> dict:
            '''Submit the day's schedule.

            Args:
                actions: one integer per hour: +1 charge, -1 discharge, 0 idle.
            '''
    """
    if fn.__name__ in _RESERVED:
        raise ToolSchemaError(
            f"tool {fn.__name__}: the name is Env's own method, which the server calls itself; "
            f"rename the tool (e.g. '{fn.__name__}_state')"
        )
    setattr(fn, _SCHEMA_ATTR, tool_schema(fn))
    return fn


class Env:
    """One episode of an environment, served by `python3 -m corral.env MODULE:CLASS`.

    The server calls `reset` with the task's `args`, then the agent calls the `@tool`
    methods; `end_turn` gets each reply the agent ends a turn with, and `report` is what
    the task's verifiers grade once the episode is over. One process serves one episode.
    """

    def reset(self, task: dict) -> None:
        """Start the episode: `task` is the task's `args` (the day to load, the puzzle...)."""

    def end_turn(self, response: str) -> str | None:
        """The next turn's prompt after the agent's reply `response`, or None to end."""
        return None

    def report(self) -> dict:
        """What the verifiers grade: a JSON-serialisable dict; never offered to the agent."""
        return {}

    @classmethod
    def tool_schemas(cls) -> list[dict]:
        """The MCP tool dicts of the class's tools, base classes' first, in definition order.

        A subclass that redefines a tool keeps its place; one that redefines it without
        `@tool` withdraws it.
        """
        schemas: dict[str, dict] = {}
        for klass in reversed(cls.__mro__):
            for name, attr in vars(klass).items():
                if hasattr(attr, _SCHEMA_ATTR):
                    schemas[name] = getattr(attr, _SCHEMA_ATTR)
                else:
                    schemas.pop(name, None)
        return copy.deepcopy(list(schemas.values()))
