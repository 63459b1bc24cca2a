"""The image cache: an env's image is tagged by its folder's content, so `corral build`
builds an unchanged bundle's envs never again and a changed env (and only it) at once."""

from __future__ import annotations

import re
import shutil
import uuid

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from tests.docker.conftest import DOCKERBOX

pytestmark = pytest.mark.docker
LINE = re.compile(r"^(\w+): (corral-env/\S+) (built in \d+s|up to date)$", re.MULTILINE)


def build(bundle) -> dict[str, tuple[str, str]]:
    """`corral build BUNDLE`: env -> (its image's tag, `built in 3s` or `up to date`)."""
    result = CliRunner().invoke(app, ["build", str(bundle)])
    assert result.exit_code == 0, result.output
    return {env: (tag, state) for env, tag, state in LINE.findall(result.output)}


def states(built: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {env: state for env, (_, state) in built.items()}


def test_an_unchanged_bundle_builds_nothing_and_a_changed_env_rebuilds_alone(tmp_path, docker_engine):
    bundle = tmp_path / "dockerbox"
    shutil.copytree(DOCKERBOX, bundle)
    first = build(bundle)
    assert set(first) == {"plain", "probe"}

    (bundle / "envs/probe/__pycache__").mkdir(exist_ok=True)  # what a local run leaves: no change
    (bundle / "envs/probe/__pycache__/env.cpython-311.pyc").write_bytes(b"cache")
    assert build(bundle) == {"plain": (first["plain"][0], "up to date"), "probe": (first["probe"][0], "up to date")}

    with (bundle / "envs/plain/env.py").open("a") as source:
        source.write(f"\n# a change never built before: {uuid.uuid4().hex}\n")
    rebuilt = build(bundle)
    try:
        assert rebuilt["plain"][1].startswith("built in")
        assert rebuilt["plain"][0] != first["plain"][0]
        assert rebuilt["probe"] == (first["probe"][0], "up to date")
        assert states(build(bundle)) == {"plain": "up to date", "probe": "up to date"}
    finally:
        docker_engine.images.remove(rebuilt["plain"][0])


def test_check_shows_an_image_build_as_it_goes(tmp_path, docker_engine):
    """A first build takes a while: `corral check` says what it builds, line by line, on stderr."""
    bundle = tmp_path / "dockerbox"
    shutil.copytree(DOCKERBOX, bundle)
    with (bundle / "envs/plain/env.py").open("a") as source:
        source.write(f"\n# a change never built before: {uuid.uuid4().hex}\n")
    result = CliRunner().invoke(app, ["check", str(bundle), "--sandbox", "docker"])
    building = re.search(r"^building (corral-env/\S+) for env plain from ", result.stderr, re.MULTILINE)
    try:
        assert result.exit_code == 0, result.output
        assert building is not None, result.stderr
        assert re.search(r"^  plain: ", result.stderr, re.MULTILINE), result.stderr  # the build's own lines
    finally:
        if building is not None:
            docker_engine.images.remove(building[1])
