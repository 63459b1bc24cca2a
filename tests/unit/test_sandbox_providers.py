"""Choosing a sandbox, and what every provider promises whatever its kind: a clear refusal of a
kind that cannot work, its status, and a stream that ends cleanly on a line too long to read."""

from __future__ import annotations

import asyncio
import io
import logging
import subprocess
import sys
import zipfile

import pytest

import corral.sandboxes
from corral.errors import ConfigError
from corral.sandboxes import LocalProvider, ProviderStatus, SandboxSpec, make_provider
from corral.sandboxes import local as local_module
from corral.sandboxes.bootstrap import sdk_payload
from tests.conftest import FIXTURES

TOY = FIXTURES / "toybox/envs/toy"
TOY_SPEC = SandboxSpec("toy", TOY, ("python3", "-m", "corral.env", "env:Toy"))


def without_the_docker_package(monkeypatch) -> None:
    """Make `import docker` (and corral's docker modules) fail, as without corral[docker]."""
    for module in ("docker", "corral.sandboxes.docker_engine", "corral.sandboxes.docker_provider"):
        monkeypatch.setitem(sys.modules, module, None)


def test_an_unknown_sandbox_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match=r"^unknown sandbox 'dokcer'; choose one of: auto, docker, local, modal$"):
        make_provider("dokcer")


def test_docker_without_the_docker_package_is_refused_with_the_install_line(monkeypatch):
    without_the_docker_package(monkeypatch)
    with pytest.raises(ConfigError, match=r"needs the docker package: pip install 'corral\[docker\]'"):
        make_provider("docker")


def test_auto_warns_when_an_engine_is_here_but_the_docker_package_is_not(monkeypatch, caplog):
    without_the_docker_package(monkeypatch)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/some-engine.sock")
    with caplog.at_level(logging.INFO, logger="corral.sandboxes"):
        provider = make_provider("auto")
    assert provider.kind == "local"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "DOCKER_HOST=unix:///run/some-engine.sock" in warnings[0]
    assert "pip install 'corral[docker]'" in warnings[0]


def test_auto_finds_the_default_socket_too(monkeypatch, caplog, tmp_path):
    without_the_docker_package(monkeypatch)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    socket_path = tmp_path / "docker.sock"
    socket_path.touch()
    monkeypatch.setattr(corral.sandboxes, "DOCKER_SOCKET", socket_path)
    with caplog.at_level(logging.WARNING, logger="corral.sandboxes"):
        assert make_provider("auto").kind == "local"
    assert f"a Docker engine seems to be here ({socket_path})" in caplog.text


def test_auto_without_docker_and_without_an_engine_says_nothing_alarming(monkeypatch, caplog, tmp_path):
    without_the_docker_package(monkeypatch)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(corral.sandboxes, "DOCKER_SOCKET", tmp_path / "no.sock")
    with caplog.at_level(logging.INFO, logger="corral.sandboxes"):
        assert make_provider("auto").kind == "local"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "sandbox: local processes" in caplog.text


def test_sandbox_specs_are_values_a_provider_can_key_by():
    same = SandboxSpec("toy", TOY, ("python3", "-m", "corral.env", "env:Toy"))
    assert same == TOY_SPEC and hash(same) == hash(TOY_SPEC)
    assert {TOY_SPEC: 1}[same] == 1
    assert SandboxSpec("toy", TOY, TOY_SPEC.command, writable=("/work",)) != TOY_SPEC


def test_the_local_provider_counts_its_live_sandboxes_and_builds_nothing(no_leftover_env_processes):
    async def check() -> None:
        provider = LocalProvider()
        try:
            prepared = await provider.prepare(TOY_SPEC)
            assert (prepared.image, prepared.built) == (None, False)
            assert provider.status() == ProviderStatus("local", isolated=False, live=0, warm={})
            first = await provider.start(TOY_SPEC, {"corral.session": "s1", "corral.episode": "e1"})
            second = await provider.start(TOY_SPEC)
            assert provider.status().live == 2
            await first.close()
            assert provider.status() == ProviderStatus("local", isolated=False, live=1, warm={})
            await second.close()
            assert provider.status().live == 0
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_local_env_line_longer_than_the_limit_ends_the_stream(monkeypatch, no_leftover_env_processes):
    monkeypatch.setattr(local_module, "LINE_LIMIT", 4096)
    spec = SandboxSpec("flood", TOY, ("python3", "-c", "print('x' * 10000, flush=True); import time; time.sleep(60)"))

    async def check() -> None:
        provider = LocalProvider()
        try:
            sandbox = await provider.start(spec)
            with pytest.raises(EOFError, match="without a newline"):
                await sandbox.read_line()
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_the_sdk_sent_into_containers_carries_corral_errors_and_imports_on_its_own(tmp_path):
    payload = sdk_payload()
    archive = zipfile.ZipFile(io.BytesIO(payload.split(b"\n", 1)[1]))
    assert {"corral/__init__.py", "corral/errors.py", "corral/env/__init__.py"} <= set(archive.namelist())
    archive.extractall(tmp_path)
    # -S -I: no site-packages, no PYTHONPATH: only the standard library and the zip's files.
    code = "import corral.env, corral.errors; print(corral.errors.__file__)"
    ran = subprocess.run([sys.executable, "-S", "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {code}"],
                         capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == str(tmp_path / "corral/errors.py")


def test_a_local_env_imports_corral_errors_from_the_sdk_root(no_leftover_env_processes):
    # -S: no site-packages, so not corral's installation: only the PYTHONPATH the provider sets.
    code = "import corral.errors as e; print(e.ToolSchemaError.__name__, flush=True)"
    spec = SandboxSpec("errors", TOY, ("python3", "-S", "-c", code))

    async def check() -> None:
        provider = LocalProvider()
        try:
            sandbox = await provider.start(spec)
            assert await sandbox.read_line() == b"ToolSchemaError"
        finally:
            await provider.aclose()

    asyncio.run(check())
