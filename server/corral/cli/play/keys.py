"""What a person types in `corral play`, and what a `--script` file holds.

A line is a command (`:tools`, `:state`, `:end [response]`, `:reset`, `:quit`, `:help`) or a
tool call, written either way:

    place row=2 col=2                       name key=value ...; a value is JSON when it parses
    end_turn response="I won"               (quote a value with spaces), else the text itself
    {"tool": "place", "arguments": {"row": 2, "col": 2}}

A script (`--script FILE`) holds calls only, one JSON object a line in the second form; blank
lines and lines starting with `#` are skipped. `--record FILE` writes what was played in the
same form, so a session played by hand replays in CI.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from corral.errors import ConfigError
from corral.protocol.catalog import ToolSpec

COMMANDS = {
    ":tools": "list the tools and their parameters",
    ":state": "the episode's state on the server (step count, turn, status)",
    ":end": ":end [response]: end the turn with a reply (end_turn)",
    ":reset": "start the task over in a new episode",
    ":quit": "leave (Ctrl-D too)",
    ":help": "this list",
}


class BadInput(ValueError):
    """A line that is neither a command nor a call; the message says how to write one."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def as_script_line(self) -> str:
        return json.dumps({"tool": self.tool, "arguments": self.arguments})


@dataclass(frozen=True)
class Command:
    name: str  # one of COMMANDS
    rest: str = ""  # what follows it (the response, for :end)


def parse_line(line: str, tools: Iterable[ToolSpec]) -> ToolCall | Command | None:
    """The command or call a typed line holds; None for a blank one. Raises BadInput."""
    line = line.strip()
    if not line:
        return None
    if line.startswith(":"):
        name, _, rest = line.partition(" ")
        if name not in COMMANDS:
            raise BadInput(f"no command {name}; the commands are {', '.join(COMMANDS)}")
        return Command(name, rest.strip())
    if line.startswith("{"):
        return parse_json_call(line)
    return parse_words(line, {tool.name: tool for tool in tools})


def parse_json_call(text: str) -> ToolCall:
    """`{"tool": NAME, "arguments": {...}}` as a call."""
    try:
        call = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadInput(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(call, dict) or not isinstance(call.get("tool"), str) or set(call) - {"tool", "arguments"}:
        raise BadInput('a JSON call is {"tool": NAME, "arguments": {...}} and nothing else')
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise BadInput('"arguments" must be a JSON object, e.g. {"row": 2}')
    return ToolCall(call["tool"], arguments)


def parse_words(line: str, tools: dict[str, ToolSpec]) -> ToolCall:
    """`name key=value ...`. A parameter the tool types as a string takes the text as it is;
    any other value is JSON when it parses, else the text (the env's refusal says what it wanted)."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        raise BadInput(f"{error}: close the quote") from None
    name, arguments = words[0], {}
    properties = tools[name].input_schema.get("properties", {}) if name in tools else {}
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise BadInput(f"write each argument as key=value (got {word!r}); quote a value with spaces")
        arguments[key] = value if properties.get(key, {}).get("type") == "string" else _json_or_text(value)
    return ToolCall(name, arguments)


def read_script(path: Path) -> list[ToolCall]:
    """Every call in a script file; ConfigError naming the line of the first bad one."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read the script {path}: {error.strerror or error}") from None
    calls = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            calls.append(parse_json_call(line))
        except BadInput as error:
            raise ConfigError(
                f"{path}, line {number}: {error}; each line of a script is one call, "
                '{"tool": NAME, "arguments": {...}}'
            ) from None
    return calls


class CallCompleter(Completer):
    """Completes tool and command names first, then the tool's parameters as `name=`."""

    def __init__(self, tools: list[ToolSpec]):
        self.tools = {tool.name: tool for tool in tools}

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        before = document.text_before_cursor
        words = before.split()
        current = "" if not words or before[-1].isspace() else words[-1]
        if len(words) == 0 or (len(words) == 1 and current):
            for name in [*self.tools, *COMMANDS]:
                if name.startswith(current):
                    yield Completion(name, -len(current))
            return
        tool = self.tools.get(words[0])
        if tool is None or "=" in current:
            return
        given = {word.split("=", 1)[0] for word in words[1:]}
        for param, spec in tool.input_schema.get("properties", {}).items():
            if param.startswith(current) and param not in given:
                yield Completion(f"{param}=", -len(current), display_meta=str(spec.get("type", "")))


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
