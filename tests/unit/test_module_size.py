"""No Python file over 400 lines, as `ruff format` lays it out: a longer one holds more than one
job (a library module, a test module, a bench script alike), and is split by job into files
whose names say what each does."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("protocol", "client", "server", "sandboxes", "training", "tests", "bench", "examples", "bundles")
MAX_LINES = 400


def test_no_python_file_is_over_400_lines():
    files = [path for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 300  # the folders were found
    long = {
        str(path.relative_to(REPO)): lines
        for path in files
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
