"""`corral init`: write a small bundle to start from.

The starter bundles are the folders of `starters/` beside this module, copied as they are
except for the bundle's name: `tools` (one env with two tools, three tasks, an eval split and
a verifier) and `harness` (an agent program that runs its own loop in the sandbox).
"""

from __future__ import annotations

import re
from pathlib import Path

from corral.errors import ConfigError
from corral.server.bundles.format import NAME_PATTERN

STARTERS = Path(__file__).with_name("starters")
NAMED = ("bundle.toml", "README.md")  # the files that say the bundle's name: {{name}}


def starter_files(kind: str = "tools") -> list[Path]:
    """The starter bundle's files, relative to its folder: bundle.toml and README.md, then
    the folders' files, alphabetically."""
    starter = STARTERS / kind
    files = [p.relative_to(starter) for p in starter.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(files, key=lambda p: (len(p.parts) > 1, str(p).lower()))


def write_starter(name: str, parent: Path, kind: str = "tools") -> Path:
    """Write the starter bundle `name` of `kind` (a folder of starters/) into the folder
    `parent / name`; return that folder.

    Raise ConfigError, saying what to do, when `name` is not a bundle name or the folder is
    there and not empty.
    """
    if not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(
            f"{name!r} is not a bundle name: use letters, digits, '.', '-' and '_', starting with "
            "a letter or digit (e.g. my-bundle)"
        )
    root = parent / name
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(f"{root} is already there and not empty; pick another NAME, or --path another folder")
    for relative in starter_files(kind):
        text = (STARTERS / kind / relative).read_text()
        if relative.name in NAMED and len(relative.parts) == 1:
            text = text.replace("{{name}}", name)
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root
