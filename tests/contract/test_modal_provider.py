"""The modal provider where Modal's cloud is not needed: what it refuses without credentials,
the image it defines from an env folder and the key it caches it under, the sandboxes it asks
for (limits, network, tags), and a bundle served on it end to end, against the stand-in for
the cloud (fake_modal), whose every call is bound to the real `modal` package's signatures."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import modal
import modal.config
import pytest

from corral.client import Bundle
from corral.errors import ConfigError, ImageError
from corral.sandboxes import Resources, make_provider
from corral.sandboxes.modal import provider as provider_module
from corral.sandboxes.modal.provider import ModalProvider, env_image, image_key
from tests.contract import fake_modal
from tests.contract.conftest import FAKE_CREDENTIALS
from tests.contract.providers import SPEC
from tests.docker.conftest import DOCKERBOX


@pytest.fixture
def no_modal_credentials(monkeypatch):
    """Modal's config as on a machine that never ran `modal token set`: no variables, no profile."""
    for variable in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_OAUTH_REFRESH_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(modal.config, "_user_config", {})  # what Modal read from ~/.modal.toml at import


@pytest.fixture
def cloud(monkeypatch):
    """The modal modules talking to fake_modal; every call checked against the real API after the test."""
    from corral.sandboxes.modal import sandbox as modal_sandbox
    from corral.sandboxes.modal import verify as modal_verify

    fake = fake_modal.fake_modal(FAKE_CREDENTIALS)
    for module in (provider_module, modal_sandbox, modal_verify):
        monkeypatch.setattr(module, "modal", fake)
    fake_modal.reset_cloud()
    yield fake_modal
    refused = fake_modal.calls_modal_refuses()
    fake_modal.reset_cloud()
    assert refused == [], "the provider called modal in ways the real package refuses"


@pytest.mark.fast  # on fake_modal, in-process
def test_without_credentials_the_provider_refuses_with_the_way_to_give_them(no_modal_credentials):
    with pytest.raises(ConfigError) as refused:
        make_provider("modal")
    message = str(refused.value)
    assert message.startswith(
        "--sandbox modal needs Modal credentials and found none: set MODAL_TOKEN_ID and "
        "MODAL_TOKEN_SECRET (create a token with `modal token new`)"
    )
    assert "`modal token set`" in message and "MODAL_PROFILE" in message


def test_serve_and_bundle_local_say_the_same_without_credentials(no_modal_credentials, tmp_path):
    with pytest.raises(ConfigError, match="--sandbox modal needs Modal credentials"):
        Bundle.local(DOCKERBOX, split="plain", sandbox="modal")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MODAL_CONFIG_PATH": str(tmp_path / "none.toml")}
    corral = Path(sys.executable).parent / "corral"
    served = subprocess.run(
        [str(corral), "serve", str(DOCKERBOX), "--sandbox", "modal", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert served.returncode == 2, served.stderr
    assert served.stderr.startswith("error: --sandbox modal needs Modal credentials and found none"), served.stderr


@pytest.mark.fast  # on fake_modal, in-process
def test_an_env_image_is_its_folder_s_dockerfile_keyed_by_the_folder_s_content(tmp_path):
    folder = tmp_path / "contract"
    shutil.copytree(SPEC.context_dir, folder)
    spec = dataclasses.replace(SPEC, context_dir=folder)
    assert isinstance(env_image(spec), modal.Image)  # a definition only: nothing is sent until it is built
    key = image_key(spec)
    assert key.startswith("contract:") and key == image_key(spec)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "env.cpython-311.pyc").write_bytes(b"stale")  # what a local run leaves
    assert image_key(spec) == key
    (folder / "env.py").write_text((folder / "env.py").read_text() + "\n# changed\n")
    assert image_key(spec) != key
    assert image_key(dataclasses.replace(spec, image="ghcr.io/org/env:1")) == "prebuilt:ghcr.io/org/env:1"
    (folder / "Dockerfile").unlink()
    with pytest.raises(
        ImageError, match=r"env contract has no Dockerfile in .*; add one \(FROM an image with python3\)"
    ):
        env_image(spec)


@pytest.mark.fast  # on fake_modal, in-process
def test_sandboxes_get_the_env_s_limits_no_network_unless_it_opts_in_and_tags_the_reaper_finds(cloud):
    async def check() -> None:
        provider = ModalProvider(instance="tagged-1")
        try:
            await provider.reap_leftovers()
            spec = dataclasses.replace(SPEC, resources=Resources(cpus=0.5, memory_mb=96, pids=32))
            sandbox = await provider.start(spec, {"corral.session": "s1", "corral.episode": "e1"})
            created = cloud.Sandbox.created[-1]
            assert (created["cpu"], created["memory"], created["block_network"]) == ((0.5, 0.5), (96, 96), True)
            assert created["args"][:2] == ("python3", "-c")  # corral's bootstrap: the SDK comes over stdin
            assert await sandbox.sandbox.get_tags.aio() == {
                "corral.instance": "tagged-1",
                "corral.run": provider.run_id,
                "corral.env": "contract",
                "corral.session": "s1",
                "corral.episode": "e1",
            }
            egress = await provider.start(dataclasses.replace(spec, network="egress"))
            assert cloud.Sandbox.created[-1]["block_network"] is False
            await asyncio.gather(sandbox.close(), egress.close())
        finally:
            await provider.aclose()
        assert cloud.Sandbox.live == {}

    asyncio.run(check())


@pytest.mark.fast  # on fake_modal, in-process
def test_an_unchanged_env_is_built_once_and_found_by_its_key_on_the_next_start(cloud, tmp_path):
    async def check() -> None:
        first, second = ModalProvider(), ModalProvider()  # a server, then its restart
        try:
            built, found = await first.prepare(SPEC), await second.prepare(SPEC)
        finally:
            await asyncio.gather(first.aclose(), second.aclose())
        assert (built.built, found.built, found.image) == (True, False, built.image)
        assert cloud.Image.builds == 1
        changed = tmp_path / "contract"
        shutil.copytree(SPEC.context_dir, changed)
        (changed / "env.py").write_text((changed / "env.py").read_text() + "\n# changed\n")
        third = ModalProvider()
        try:
            assert (await third.prepare(dataclasses.replace(SPEC, context_dir=changed))).built
        finally:
            await third.aclose()
        assert cloud.Image.builds == 2

    asyncio.run(check())


def test_a_bundle_served_on_modal_plays_an_episode_to_its_reward(cloud):
    with Bundle.local(DOCKERBOX, split="plain", sandbox="modal", warm_pool=1) as env:
        assert env._http.get("/health").json()["sandbox"]["kind"] == "modal"
        environment = env.factory()
        environment.reset(**env.dataset[0])
        assert environment.say(text="plain") == "plain"
        assert environment.get_reward() == 1.0
