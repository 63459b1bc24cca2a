"""How values cross between run_tests.py and repo_worker.py: plain literals, nothing else.

Each message is one line, `repr()` of a tuple, read back with `ast.literal_eval`, which builds
values and never runs code. A value is tagged by its exact type (a subclass of `list` or `int`
is an object, not a value), so what the tests compare is always a builtin value whose
equality the repository's code cannot define:

    ("=", 3)                     None, bool, int, float, complex, str, bytes
    ("float", "nan")             a float or complex that is not finite (no literal spells it)
    ("list", (item, ...))        list, tuple, set, frozenset: their items, tagged
    ("dict", ((key, value), ...))
    ("obj", handle, kind, name, base)   an object that stays in the worker: kind is "class",
                                 "module", "callable" or "object"; base, for an exception
                                 class, names its nearest builtin base class
    ("ref", handle)              an object of the worker's, handed back to it
"""

import ast
import math

SCALARS = (type(None), bool, int, float, complex, str, bytes)
COLLECTIONS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
MAX_LINE = 16 * 1024 * 1024


class Garbage(Exception):
    """A message that does not follow this module's rules."""


def encode(value, other):
    """`value` tagged; `other(value)` tags whatever is not a plain value (or raises)."""
    kind = type(value)
    if kind in SCALARS:
        if kind in (float, complex) and not _finite(value):
            return ("float" if kind is float else "complex", repr(value))
        return ("=", value)
    if kind in (list, tuple, set, frozenset):
        return (kind.__name__, tuple(encode(item, other) for item in value))
    if kind is dict:
        return ("dict", tuple((encode(key, other), encode(item, other)) for key, item in value.items()))
    return other(value)


def decode(data, other):
    """The value `data` stands for; `other(data)` rebuilds "obj" and "ref" entries. Raises
    Garbage for anything else."""
    try:
        tag = data[0]
        if tag == "=" and len(data) == 2 and type(data[1]) in SCALARS:
            return data[1]
        if tag in ("float", "complex") and len(data) == 2 and type(data[1]) is str:
            return (float if tag == "float" else complex)(data[1])
        if tag in COLLECTIONS and len(data) == 2 and type(data[1]) is tuple:
            return COLLECTIONS[tag](decode(item, other) for item in data[1])
        if tag == "dict" and len(data) == 2 and type(data[1]) is tuple:
            return {decode(key, other): decode(item, other) for key, item in data[1]}
        if tag in ("obj", "ref"):
            return other(data)
    except Garbage:
        raise
    except Exception as error:  # noqa: BLE001 - unhashable keys, wrong shapes, wrong lengths...
        raise Garbage(f"{type(error).__name__}: {error}") from None
    raise Garbage(f"no value is tagged {str(data)[:80]}")


def dumps(message) -> bytes:
    return repr(message).encode("utf-8") + b"\n"


def loads(line: bytes):
    """One message; Garbage for a line that is too long, unfinished or not a literal tuple."""
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise Garbage("the line is unfinished or longer than 16 MB")
    try:
        message = ast.literal_eval(line.decode("utf-8"))
    except Exception as error:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError...
        raise Garbage(f"not a literal: {type(error).__name__}") from None
    if type(message) is not tuple or not message or type(message[0]) is not str:
        raise Garbage("not a tagged tuple")
    return message


def _finite(number) -> bool:
    if isinstance(number, complex):
        return math.isfinite(number.real) and math.isfinite(number.imag)
    return math.isfinite(number)
