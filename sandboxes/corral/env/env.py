"""`Env`, the class an environment subclasses, and `@tool`, which offers a method to the agent."""

import copy
from collections.abc import Callable
from typing import TypeVar

from corral.env.schema import tool_schema
from corral.errors import ToolSchemaError

_F = TypeVar("_F", bound=Callable)
# The runtime's own methods: a tool of the same name would hide one from the server.
_RESERVED = frozenset({"reset", "end_turn", "report", "tool_schemas"})
# Set by @tool on the method: its MCP tool dict, or the ToolSchemaError saying why it has none.
_SCHEMA_ATTR = "__corral_tool__"


def tool(fn: _F) -> _F:
    """Offer a method to the agent as a tool, described by its type hints and docstring.

    The schema is built here, when the class body runs. A tool that cannot be described
    makes its class fail at definition with one ToolSchemaError that lists every such tool
    of the class, each with what to fix. The method itself is returned unchanged and
    receives the arguments as JSON gives them (an Enum parameter gets its member's value).

        @tool
        def submit_schedule(self, actions: list[int]) -> dict:
            '''Submit the day's schedule.

            Args:
                actions: one integer per hour: +1 charge, -1 discharge, 0 idle.
            '''
    """
    described: dict | ToolSchemaError
    if fn.__name__ in _RESERVED:
        described = ToolSchemaError(
            f"tool {fn.__name__}: the name is Env's own method, which the server calls itself; "
            f"rename the tool (e.g. '{fn.__name__}_state')"
        )
    else:
        try:
            described = tool_schema(fn)
        except ToolSchemaError as exc:
            described = exc
    setattr(fn, _SCHEMA_ATTR, described)
    return fn


class Env:
    """One episode of an environment, served by `python3 -m corral.env MODULE:CLASS`.

    The server calls `reset` with the task's `args`, then the agent calls the `@tool`
    methods; `end_turn` gets each reply the agent ends a turn with, and `report` is what
    the task's verifiers grade once the episode is over. One process serves one episode.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        problems = [str(d) for d in _tools(cls).values() if isinstance(d, ToolSchemaError)]
        if problems:
            lines = "\n".join(f"    {problem}" for problem in problems)
            raise ToolSchemaError(f"{cls.__name__} has {len(problems)} tool(s) that cannot be described:\n{lines}")

    def reset(self, args: dict) -> None:
        """Start the episode with the task's `args` (the day to load, the puzzle...): the task's own
        fields stay the verifiers' (`verify(task, report)` gets the whole task)."""

    def resume(self, args: dict) -> None:
        """Start a fork's copy of an episode of the task with `args` (fork = "copy" in env.toml):
        the episode's writable folders replace this sandbox's once this returns, so set up what
        `reset` keeps in memory and skip writing files (the costly part of a task's load). By
        default `reset`, whose files the copy then replaces."""
        self.reset(args)

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
        # A class with a tool that cannot be described failed when it was defined: all are dicts.
        return copy.deepcopy([schema for schema in _tools(cls).values() if isinstance(schema, dict)])


def _tools(cls: type) -> dict[str, dict | ToolSchemaError]:
    """The tools `cls` offers, by name: each one's schema, or why it has none."""
    tools: dict[str, dict | ToolSchemaError] = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            if hasattr(attr, _SCHEMA_ATTR):
                tools[name] = getattr(attr, _SCHEMA_ATTR)
            else:
                tools.pop(name, None)
    return tools
