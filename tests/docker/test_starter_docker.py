"""The bundle `corral init` writes builds from the local debian:bookworm-slim and scores an
episode on the docker sandbox."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from tests.integration.test_starter_bundle import init_bundle, play_the_starter


@pytest.mark.docker
def test_the_starter_bundle_scores_an_episode_on_the_docker_sandbox(tmp_path, serve_docker):
    server = serve_docker(init_bundle(tmp_path))  # sandbox="docker": no fallback to local

    play_the_starter(server.url)


@pytest.mark.docker
def test_check_picks_the_sandbox_serve_would(tmp_path, docker_engine):
    """`corral check` defaults to `--sandbox auto`, as serve does: with an engine answering, an
    env without a Dockerfile fails the check it would have passed on local processes."""
    bundle = init_bundle(tmp_path)
    (bundle / "envs" / "counter" / "Dockerfile").unlink()

    on_auto = CliRunner().invoke(app, ["check", str(bundle)])
    on_local = CliRunner().invoke(app, ["check", str(bundle), "--sandbox", "local"])

    assert on_auto.exit_code == 1
    assert "env counter has no Dockerfile" in on_auto.output
    assert on_local.exit_code == 0, on_local.output
