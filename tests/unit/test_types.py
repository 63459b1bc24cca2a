"""The library packages type-check clean: mypy over protocol, client, server, sandboxes and
training with pyproject.toml's [tool.mypy] (the five roots as one `corral` namespace)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow  # mypy reads the whole library and docker's code (a minute or two of CPU uncached)
@pytest.mark.timeout(900)  # far from what a loaded machine needs
def test_the_library_type_checks_clean():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, check=False)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and errors == [], "mypy finds type errors; fix them:\n" + (
        "\n".join(errors) or done.stdout + done.stderr
    )
