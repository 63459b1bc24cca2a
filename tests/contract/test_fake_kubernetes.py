"""The Kubernetes stand-in on a machine without bubblewrap: its pods cannot start, and the
provider says why at once instead of waiting out its start deadline."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from corral.errors import SandboxError
from tests.contract.providers import SPEC, KubernetesUnderTest

pytestmark = pytest.mark.fast


def path_without_bwrap(folder: Path) -> str:
    """A PATH of links to every command on this one but bwrap."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name != "bwrap" and not link.exists():
                link.symlink_to(entry.path)
    return str(folder)


def test_a_pod_that_needs_bwrap_where_none_is_fails_at_once_naming_it(tmp_path, monkeypatch):
    under = KubernetesUnderTest.serve(tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path / "bin"))
    assert shutil.which("bwrap") is None

    async def check() -> None:
        provider = under.make()
        try:
            await provider.prepare(SPEC)
            with pytest.raises(SandboxError, match=r"CreateContainerError: .*`bwrap` is not on PATH.*setup-machine"):
                await provider.start(SPEC)
        finally:
            await provider.aclose()

    started = time.monotonic()
    try:
        asyncio.run(check())
    finally:
        under.stop()
    assert time.monotonic() - started < 20
