"""No library module over 400 lines: a longer one holds more than one job, and is
split by job into modules whose names say what each does."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIBRARY = ("protocol", "client", "server", "sandboxes", "training")
MAX_LINES = 400


def test_no_library_module_is_over_400_lines():
    modules = [path for package in LIBRARY for path in sorted((REPO / package).rglob("*.py"))]
    assert len(modules) > 100  # the packages were found
    long = {str(path.relative_to(REPO)): lines for path in modules
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}
