"""The docs a new user reads hold no placeholders, and name only what the README sets up: no
`.venv/bin/...` when the README makes no .venv, no extra that pyproject.toml lacks, and the
notebook's `jupyter` from an extra that installs it."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPTS = [
    *sorted((REPO / "bench").glob("*.py")),
    *sorted((REPO / "examples").glob("*.py")),
    REPO / "examples" / "play.ipynb",
]
PLACEHOLDER = re.compile(r"\b(?:[A-Z_]*PLACEHOLDER|TODO|TBD|XXX|FIXME)\b")
EXTRAS = re.compile(r"(?:\.|corral)\[([a-z0-9_,-]+)\]")


def lines_matching(pattern: re.Pattern[str], paths: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_doc_holds_a_placeholder():
    assert lines_matching(PLACEHOLDER, DOCS) == []


def test_no_doc_or_script_runs_a_venv_the_readme_never_makes():
    readme = (REPO / "README.md").read_text()
    assert "venv .venv" not in readme  # were it made there, the paths below would be fine
    assert lines_matching(re.compile(r"\.venv/"), [*DOCS, *SCRIPTS]) == []


def test_every_extra_the_docs_install_is_in_pyproject():
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {
        extra for path in [*DOCS, *SCRIPTS] for group in EXTRAS.findall(path.read_text()) for extra in group.split(",")
    }
    assert named and named <= extras, named - extras


def test_the_extra_that_opens_the_notebook_installs_jupyter_and_nbconvert():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    notebook = " ".join(extras["notebook"])
    assert "jupyterlab" in notebook and "nbconvert" in notebook
    assert "ipywidgets" in notebook  # tqdm's notebook bars (datasets' map) warn without it
    assert any(need.startswith("nbconvert") for need in extras["dev"])  # the tests run it headless too


def test_the_notebooks_headless_command_writes_where_git_ignores():
    """Run as the notebook says, from the repository root, nbconvert leaves no untracked file."""
    (command,) = re.findall(r"`(jupyter nbconvert [^`]+)`", (REPO / "examples" / "play.ipynb").read_text())
    words = command.split()
    folder = words[words.index("--output-dir") + 1] if "--output-dir" in words else "examples"
    name = words[words.index("--output") + 1] if "--output" in words else "play.ipynb"
    written = Path(folder) / name
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", str(written)], cwd=REPO, check=False)
    assert ignored.returncode == 0, f"{command} writes {written}, which git does not ignore"
