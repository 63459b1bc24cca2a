"""Check a tool call's arguments against the tool's inputSchema before the tool runs.

A model's mistake then comes back as a message it can act on (`submit_schedule: argument
'actions' must be an array of integers; item 3 is "x"`) instead of a traceback from deep in
the env. Only the schema features that `schema.tool_schema` writes are understood.
"""

import json
from collections.abc import Iterable
from typing import Any

_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_NOUNS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}
_PLURALS = {
    "integer": "integers",
    "number": "numbers",
    "string": "strings",
    "boolean": "booleans",
    "null": "nulls",
    "array": "arrays",
    "object": "objects",
}


def check_arguments(tool: dict, arguments: dict) -> str | None:
    """Every problem with `arguments`, one a line, or None when the tool can be called."""
    name, schema = tool["name"], tool["inputSchema"]
    properties = schema["properties"]
    problems = []
    for param in schema.get("required", []):
        if param not in arguments:
            problems.append(f"{name}: argument '{param}' is missing; it must be {_describe(properties[param])}")
    for param, value in arguments.items():
        if param not in properties:
            offered = ", ".join(f"'{p}'" for p in properties) or "none"
            problems.append(f"{name}: unknown argument '{param}'; its arguments are {offered}")
            continue
        fault = _fault(value, properties[param])
        if fault is not None:
            path, bad = fault
            where = " of ".join(path) + " is" if path else "got"
            problems.append(f"{name}: argument '{param}' must be {_describe(properties[param])}; {where} {_show(bad)}")
    return "\n".join(problems) or None


def _describe(schema: dict) -> str:
    """What a value of `schema` is, in words: `an array of integers`, `one of "a", "b"`."""
    if "enum" in schema:
        text = "one of " + ", ".join(_show(v) for v in schema["enum"])
    elif "anyOf" in schema:
        text = " or ".join(_describe(s) for s in schema["anyOf"])
    elif isinstance(schema.get("type"), list):
        text = " or ".join(_NOUNS[t] for t in schema["type"])
    elif "type" not in schema:
        text = "any JSON value"
    elif "prefixItems" in schema:
        items = schema["prefixItems"]
        text = f"an array of exactly {len(items)} items: " + ", ".join(_describe(s) for s in items)
    elif "items" in schema:
        items = schema["items"]
        if set(items) <= {"type", "description"} and isinstance(items.get("type"), str):
            text = f"an array of {_PLURALS[items['type']]}"
        else:
            text = f"an array whose items are each {_describe(items)}"
    elif "additionalProperties" in schema:
        text = f"an object whose values are each {_describe(schema['additionalProperties'])}"
    else:
        text = _NOUNS[schema["type"]]
    return text + " or null" if schema.get("nullable") else text


def _fault(value: Any, schema: dict) -> tuple[list[str], Any] | None:
    """Where `value` breaks `schema` (innermost first: `["item 1", "item 3"]`) and the value."""
    if value is None and schema.get("nullable"):
        return None
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        return [], value
    if "anyOf" in schema:
        return None if any(_fault(value, s) is None for s in schema["anyOf"]) else ([], value)
    kinds = schema.get("type")
    if kinds is None:
        return None
    if not any(_TYPES[k](value) for k in ([kinds] if isinstance(kinds, str) else kinds)):
        return [], value
    if isinstance(value, list):
        return _array_fault(value, schema)
    if isinstance(value, dict) and "additionalProperties" in schema:
        for key, item in value.items():
            fault = _fault(item, schema["additionalProperties"])
            if fault is not None:
                return [*fault[0], f"key {json.dumps(key)}"], fault[1]
    return None


def _array_fault(value: list, schema: dict) -> tuple[list[str], Any] | None:
    """The first item of an array that breaks `items` or `prefixItems`."""
    if "prefixItems" in schema:
        if len(value) != len(schema["prefixItems"]):
            return [], value
        pairs: Iterable[tuple[Any, Any]] = zip(value, schema["prefixItems"])
    elif "items" in schema:
        pairs = ((item, schema["items"]) for item in value)
    else:
        return None
    for index, (item, item_schema) in enumerate(pairs):
        fault = _fault(item, item_schema)
        if fault is not None:
            return [*fault[0], f"item {index}"], fault[1]
    return None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: `true` is not `1`."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _show(value: Any) -> str:
    """A value as JSON, cut short enough for one line of an error message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
