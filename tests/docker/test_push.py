"""`corral build --push REGISTRY`: this machine's Docker engine pushes each env's image to a
registry (tests/docker/fake_registry.py, on the real wire), under the very name the kubernetes
provider's pods pull; a registry that is not there, or that refuses, is said with the fix."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import socket

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.sandboxes.kubernetes.cluster import Settings
from corral.sandboxes.kubernetes.provider import KubernetesProvider
from corral.server.bundles.checks import sandbox_spec
from corral.server.formats import load_bundle
from tests.docker.conftest import DOCKERBOX
from tests.docker.fake_registry import FakeRegistry

pytestmark = pytest.mark.docker


@pytest.fixture
def registry(docker_engine, tmp_path, monkeypatch):
    """A registry on 127.0.0.1, the engine's credentials read from an empty folder (none), and
    the engine's tags of it removed afterwards."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    started = FakeRegistry(user="trainer", password="s3cret")
    started.start()
    yield started
    started.stop()
    untag(docker_engine, started.address)


def untag(engine, registry_address: str) -> None:
    for image in engine.images.list():
        for tag in image.tags:
            if tag.startswith(registry_address + "/"):
                engine.images.remove(tag)


def log_in(tmp_path, registry: FakeRegistry, password: str) -> None:
    """What `docker login` writes for `registry` (docker-py reads it from DOCKER_CONFIG)."""
    auth = base64.b64encode(f"{registry.user}:{password}".encode()).decode()
    (tmp_path / "docker-config").mkdir(exist_ok=True)
    (tmp_path / "docker-config/config.json").write_text(json.dumps({"auths": {registry.address: {"auth": auth}}}))


def build_and_push(registry_address: str):
    return CliRunner().invoke(app, ["build", str(DOCKERBOX), "--push", registry_address])


def pulled_by_kubernetes(registry_address: str) -> dict[str, str]:
    """env -> the image reference the kubernetes provider's pods pull with CORRAL_REGISTRY=registry_address."""
    provider = KubernetesProvider(settings=Settings(kubeconfig=None, registry=registry_address))
    loaded = load_bundle(DOCKERBOX)

    async def prepare() -> dict[str, str]:
        return {
            name: str((await provider.prepare(sandbox_spec(env), lambda line: None)).image)
            for name, env in loaded.envs.items()
        }

    return asyncio.run(prepare())


def test_each_env_image_arrives_whole_under_the_name_kubernetes_pulls(registry, tmp_path, docker_engine):
    log_in(tmp_path, registry, registry.password)
    result = build_and_push(registry.address)
    assert result.exit_code == 0, result.output

    pulled = pulled_by_kubernetes(registry.address)
    assert set(pulled) == {"plain", "probe"}
    for env, reference in pulled.items():
        assert f"{env}: {reference} pushed" in result.output
        name, tag = reference.removeprefix(registry.address + "/").rsplit(":", 1)
        manifest = registry.manifest(name, tag)
        local = docker_engine.images.get(f"{name}:{tag}")  # the image `corral build` built and tagged
        assert manifest["config"]["digest"] == local.id
        # Each layer that arrived, unpacked, is one of the image's layers, in order.
        arrived = [
            "sha256:" + hashlib.sha256(gzip.decompress(registry.blobs[layer["digest"]])).hexdigest()
            for layer in manifest["layers"]
        ]
        assert arrived == local.attrs["RootFS"]["Layers"]
    assert "Pushed" in result.output or "Layer already exists" in result.output  # a line per layer
    assert registry.unknown == []


def test_a_registry_that_refuses_the_push_says_to_log_in(registry):
    result = build_and_push(registry.address)  # no credentials at all
    assert result.exit_code == 1
    assert f"the registry {registry.address} refused it" in result.output
    assert f"docker login {registry.address}" in result.output
    assert registry.manifests == {}
    # A wrong password ends the same way ("unauthorized"), after the engine's own retries (50 s).


def test_a_registry_that_is_not_there_says_so(docker_engine):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{probe.getsockname()[1]}"
    try:
        result = build_and_push(nobody)
    finally:
        untag(docker_engine, nobody)
    assert result.exit_code == 1
    assert f"the registry {nobody} did not answer" in result.output
    assert "connection refused" in result.output


def test_a_registry_given_as_a_url_is_refused_with_the_form_it_takes(docker_engine):
    result = build_and_push("http://127.0.0.1:5000")
    assert result.exit_code == 1
    assert "host[:port][/path], without a scheme" in result.output
