"""`--sandbox auto`: docker when an engine answers, else local processes, saying so; `docker`
without an engine is refused with the fix."""

from __future__ import annotations

import asyncio
import logging

import pytest

from corral.errors import ConfigError
from corral.sandboxes import make_provider


@pytest.mark.docker
def test_auto_picks_docker_when_an_engine_answers(docker_engine):
    provider = make_provider("auto")
    try:
        assert (provider.kind, provider.isolated) == ("docker", True)
    finally:
        asyncio.run(provider.aclose())


def test_auto_falls_back_to_local_processes_when_no_engine_answers(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with caplog.at_level(logging.INFO, logger="corral.sandboxes"):
        provider = make_provider("auto")
    assert (provider.kind, provider.isolated) == ("local", True)  # bubblewrap runs here (CI installs it)
    assert "sandbox: local processes, each episode in namespaces of its own (bubblewrap)" in caplog.text


def test_docker_without_an_engine_is_refused_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(ConfigError, match="no Docker engine answers .* or serve with --sandbox local"):
        make_provider("docker")
