"""Text that can be written back: JSON's `\\ud800`-`\\udfff` escapes decode to lone surrogates,
which no UTF-8 encoder writes.

A model's tool call (`json.dumps` escapes them so), or an env that answers with a file name
that is not UTF-8, can carry one; a reply that echoes it then cannot be encoded, and the
session would break, its episode unscored. Every text that enters corral from outside (a
client's frame, an env's line) is read through `loads`, which puts U+FFFD in place of each
lone surrogate: the only change, and only when there is one.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")  # an env's lines are scanned undecoded


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`, with every lone surrogate in its strings (and keys) made U+FFFD."""
    value = json.loads(text)
    return replace_lone_surrogates(value) if has_lone_surrogate_escape(text) else value


def has_lone_surrogate_escape(text: str | bytes) -> bool:
    """Whether `text` may hold a JSON escape of a surrogate (a quick test, before any parsing)."""
    if isinstance(text, str):
        return _SURROGATE_ESCAPE.search(text) is not None
    return _SURROGATE_ESCAPE_BYTES.search(text) is not None


def replace_lone_surrogates(value: Any) -> Any:
    """`value` (what json.loads gave) with U+FFFD for each lone surrogate in its strings."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [replace_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {replace_lone_surrogates(key): replace_lone_surrogates(item) for key, item in value.items()}
    return value
