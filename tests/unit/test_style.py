"""The tree is linted and formatted as pyproject.toml's [tool.ruff] says: `ruff check` finds
nothing and `ruff format --check` would change nothing (ruff is pinned in the dev extra, so
every machine formats alike). After editing, `ruff format . && ruff check --fix .` keeps it so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

RUFF = Path(sys.executable).parent / "ruff"
FIXES = {"check": "ruff check --fix .", "format": "ruff format ."}


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_finds_nothing_to_change(command: list[str]) -> None:
    done = subprocess.run([str(RUFF), *command], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ruff wants changes; run `{FIXES[command[0]]}`:\n{done.stdout[-3000:]}{done.stderr}"
