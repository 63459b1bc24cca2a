"""A tool's JSON Schema, built from its type hints and Google-style docstring.

The rules and the output are those of transformers' `get_json_schema`, so a tool described
here renders in a chat template exactly as the method the client generates from it. The
result has MCP's shape: `{"name", "description", "inputSchema"}`.
"""

import enum
import inspect
import json
import re
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from corral.errors import ToolSchemaError  # also imported from here, and from corral.env

# The three expressions below are transformers' own, so a docstring parses the same way there.
_DESCRIPTION_RE = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
_ARGS_RE = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
_ARG_SPLIT_RE = re.compile(
    r"""
(?:^|\n)
([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*
(.*?)\s*
(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)
""",
    re.DOTALL | re.VERBOSE,
)
_CHOICES_RE = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_BARE = {
    **{t: {"type": name} for t, name in _SCALARS.items()},
    list: {"type": "array"},
    tuple: {"type": "array"},
    dict: {"type": "object"},
    Any: {},
}
_SUPPORTED = "int, float, str, bool, None, Any, a Literal, an Enum, or list, tuple, dict and Union of those"


class _HintError(Exception):
    """Why one type hint has no JSON schema; `tool_schema` adds the tool and the parameter."""


def tool_schema(fn: Callable) -> dict:
    """Describe `fn` as an MCP tool, or raise ToolSchemaError saying what to fix.

    A leading `self` (or `cls`) without a type hint is the receiver, not a parameter.
    `inputSchema["required"]` lists the parameters without defaults and, as in transformers,
    is left out when there are none.
    """
    name = fn.__name__
    doc = inspect.getdoc(fn)
    if not doc:
        raise ToolSchemaError(
            f"tool {name}: it has no docstring; add one that says what the tool does, with an "
            f"'Args:' section that describes each parameter"
        )
    description, arg_docs = _parse_docstring(doc.strip())
    params = _parameters(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - NameError, TypeError...: all mean the same fix
        raise ToolSchemaError(
            f"tool {name}: its type hints cannot be resolved ({type(exc).__name__}: {exc}); "
            f"define or import every type it names before the tool's class"
        ) from None

    properties = {}
    for param in params:
        try:
            schema = _parse_hint(hints[param])
        except _HintError as exc:
            raise ToolSchemaError(
                f"tool {name}: parameter '{param}' has the type hint {_show(hints[param])}, "
                f"which has no JSON schema: {exc}; use {_SUPPORTED}"
            ) from None
        if param not in arg_docs:
            raise ToolSchemaError(
                f"tool {name}: parameter '{param}' is not described; add it under 'Args:' in "
                f"the docstring, as '    {param}: what it is'"
            )
        properties[param] = _describe(name, param, schema, arg_docs[param])

    input_schema: dict = {"type": "object", "properties": properties}
    required = [p for p, sig in params.items() if sig.default is inspect.Parameter.empty]
    if required:
        input_schema["required"] = required
    return {"name": name, "description": description, "inputSchema": input_schema}


def _parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    """The parameters the agent fills in, refusing those a JSON object cannot carry."""
    name = fn.__name__
    params = dict(inspect.signature(fn).parameters)
    first = next(iter(params), None)
    if first in {"self", "cls"} and params[first].annotation is inspect.Parameter.empty:
        del params[first]
    for param, sig in params.items():
        if sig.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolSchemaError(
                f"tool {name}: parameter '*{param}' takes any number of values, which a JSON "
                f"schema cannot name; replace it with a list, as '{param}: list[str]'"
            )
        if sig.kind is inspect.Parameter.VAR_KEYWORD:
            raise ToolSchemaError(
                f"tool {name}: parameter '**{param}' takes any keyword, which a JSON schema "
                f"cannot name; replace it with named parameters, or with '{param}: dict'"
            )
        if sig.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolSchemaError(
                f"tool {name}: parameter '{param}' is positional-only, but tools are called "
                f"with named arguments; remove the '/' from the signature"
            )
        if sig.annotation is inspect.Parameter.empty:
            raise ToolSchemaError(f"tool {name}: parameter '{param}' has no type hint; add one, as '{param}: str'")
    return params


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the text before `Args:`) and each argument's description."""
    found = _DESCRIPTION_RE.search(doc)
    assert found is not None  # the pattern may end at \Z: it matches every text
    description = found.group(1).strip()
    args_match = _ARGS_RE.search(doc)
    if args_match is None:
        return description, {}
    block = "\n".join(line for line in args_match.group(1).split("\n") if line.strip())
    args = {m[1]: re.sub(r"\s*\n+\s*", " ", m[2].strip()) for m in _ARG_SPLIT_RE.findall(block)}
    return description, args


def _describe(name: str, param: str, schema: dict, text: str) -> dict:
    """Add the argument's description, and its `(choices: [...])` suffix as `enum`."""
    choices = _CHOICES_RE.search(text)
    if choices:
        try:
            values = json.loads(choices.group(1))
        except ValueError:
            values = None
        if not isinstance(values, list):
            raise ToolSchemaError(
                f"tool {name}: parameter '{param}' has '(choices: {choices.group(1)})', which is "
                f'not a JSON list; write it as \'(choices: ["a", "b"])\''
            )
        schema["enum"] = [v.strip() if isinstance(v, str) else v for v in values]
        text = text[: choices.start()].strip()
    schema["description"] = text
    return schema


def _parse_hint(hint: Any) -> dict:
    """The JSON Schema of one type hint (transformers' `_parse_type_hint`)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is None and isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        if not values:
            raise _HintError(f"the Enum {hint.__name__} has no members")
        return _enum(values, f"the Enum {hint.__name__}")
    if origin is None:
        if hint not in _BARE:
            raise _HintError("it is not a type JSON has")
        return dict(_BARE[hint])
    if origin is Union or origin is types.UnionType:
        subtypes = [_parse_hint(t) for t in args if t is not type(None)]
        if len(subtypes) == 1:
            schema = subtypes[0]
        elif all(s.keys() == {"type"} and isinstance(s["type"], str) for s in subtypes):
            names = sorted({s["type"] for s in subtypes})
            schema = {"type": names[0] if len(names) == 1 else names}
        else:
            schema = {"anyOf": subtypes}
        if type(None) in args:
            schema["nullable"] = True
        return schema
    if origin is Literal and args:
        return _enum(list(args), "a Literal")
    if origin is list:
        return {"type": "array", "items": _parse_hint(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1:
            raise _HintError("a tuple of one element; use the element's type, or a list")
        if ... in args:
            raise _HintError("a tuple of any length; use a list")
        return {"type": "array", "prefixItems": [_parse_hint(t) for t in args]}
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _parse_hint(args[1])
        return schema
    raise _HintError("it is not a type JSON has")


def _enum(values: list, what: str) -> dict:
    """An `enum` schema whose `type` lists the JSON types of the values, in order of first use."""
    if any(type(v) not in _SCALARS for v in values):
        raise _HintError(f"{what} has values that are not JSON scalars: {values!r}")
    kinds = list(dict.fromkeys(_SCALARS[type(v)] for v in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _show(hint: Any) -> str:
    """A type hint as written in code: `list[int]`, `Point`."""
    if isinstance(hint, type) and not get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")
