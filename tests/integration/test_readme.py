"""README.md's Python code blocks run as written, each in a fresh interpreter from the
repository's root, as a reader pastes them; a block the README marks as not run here (it needs
a GPU box, a remote host, a model download) still compiles, and its imports are found."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.readme_blocks import Block, python_blocks

BLOCKS = python_blocks(REPO / "README.md")
pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    # No engine at DOCKER_HOST: `--sandbox auto` picks local processes, as on a laptop without Docker.
    environ = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=environ, capture_output=True, text=True, timeout=240, check=False
    )


def test_the_readme_has_blocks_that_run_and_blocks_marked_not_to():
    assert any(block.not_run is None for block in BLOCKS) and any(block.not_run for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"line-{block.line}")
def test_a_readme_block_runs_as_written(block: Block, tmp_path):
    code = block.code if block.not_run is None else block.imports
    compile(block.code, f"README.md:{block.line}", "exec")
    done = run(code, tmp_path)
    assert done.returncode == 0, f"README.md line {block.line}:\n{done.stderr[-3000:]}"
