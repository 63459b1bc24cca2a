"""Choosing a sandbox, and what every provider promises whatever its kind: a clear refusal of a
kind that cannot work, its status, and a stream that ends cleanly on a line too long to read."""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import corral.sandboxes
from corral.env import jsonrpc
from corral.errors import ConfigError, SandboxError
from corral.sandboxes import LocalProvider, ProviderStatus, SandboxSpec, make_provider
from corral.sandboxes.local import sandbox as local_sandbox_module
from corral.sandboxes.local.sandbox import LocalSandbox
from corral.sandboxes.shared.bootstrap import sdk_payload
from tests.conftest import FIXTURES, skip_or_fail_under_ci

TOY = FIXTURES / "toybox/envs/toy"
TOY_SPEC = SandboxSpec("toy", TOY, ("python3", "-m", "corral.env", "env:Toy"))


def without_the_docker_package(monkeypatch) -> None:
    """Make `import docker` (and corral's docker modules) fail, as without corral[docker]."""
    for module in ("docker", "corral.sandboxes.docker.engine", "corral.sandboxes.docker.provider"):
        monkeypatch.setitem(sys.modules, module, None)


def test_an_unknown_sandbox_is_refused_naming_the_choices():
    with pytest.raises(
        ConfigError, match=r"^unknown sandbox 'dokcer'; choose one of: auto, docker, local, modal, kubernetes$"
    ):
        make_provider("dokcer")


def test_docker_without_the_docker_package_is_refused_with_the_install_line(monkeypatch):
    without_the_docker_package(monkeypatch)
    with pytest.raises(ConfigError, match=r"needs the docker package: pip install 'corral\[docker\]'"):
        make_provider("docker")


@pytest.mark.bwrap
def test_auto_warns_when_an_engine_is_here_but_the_docker_package_is_not(monkeypatch, caplog):
    without_the_docker_package(monkeypatch)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/some-engine.sock")
    with caplog.at_level(logging.INFO, logger="corral.sandboxes"):
        provider = make_provider("auto")
    assert provider.kind == "local"
    # corral's own: asyncio may warn here of a child whose loop an earlier test closed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("corral")]
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


@pytest.mark.bwrap
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


@pytest.mark.bwrap
def test_the_local_provider_counts_its_live_sandboxes_and_builds_nothing(no_leftover_env_processes):
    async def check() -> None:
        provider = LocalProvider()
        try:
            began = time.monotonic()
            prepared = await provider.prepare(TOY_SPEC)
            assert (prepared.image, prepared.built) == (None, False)
            assert 0 <= prepared.seconds <= time.monotonic() - began
            assert provider.status() == ProviderStatus("local", isolated=True, live=0, warm={})
            first = await provider.start(TOY_SPEC, {"corral.session": "s1", "corral.episode": "e1"})
            second = await provider.start(TOY_SPEC)
            assert provider.status().live == 2
            await first.close()
            assert provider.status() == ProviderStatus("local", isolated=True, live=1, warm={})
            await second.close()
            assert provider.status().live == 0
        finally:
            await provider.aclose()

    asyncio.run(check())


@pytest.mark.bwrap
def test_a_local_env_that_cannot_start_is_refused_saying_why_and_leaves_nothing(monkeypatch, no_leftover_env_processes):
    missing = SandboxSpec("missing", TOY, ("/no-such-command-of-corral",))
    stdin = os.fstat(0)  # the server's own descriptors stay its own whatever fails

    def disk_full(sandbox: LocalSandbox, path, mode: int = 0o700, **owner) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async def check() -> None:
        provider = LocalProvider()
        try:
            with pytest.raises(SandboxError, match="/no-such-command-of-corral"):  # as root: not runnable by all
                await provider.start(missing)
            with monkeypatch.context() as patched:
                patched.setattr(LocalSandbox, "own", disk_full)
                with pytest.raises(
                    SandboxError,
                    match=r"could not make the folders of an episode of env toy in "
                    r".*No space left on device",
                ):
                    await provider.start(TOY_SPEC)
            assert provider.status().live == 0
            assert {entry.name for entry in provider.root.iterdir()} <= {"shared"}  # no episode's folder
            sandbox = await provider.start(TOY_SPEC)  # and the next episode starts
            assert sandbox.alive
        finally:
            await provider.aclose()

    asyncio.run(check())
    assert os.fstat(0) == stdin


@pytest.mark.bwrap
@pytest.mark.timing
def test_as_root_an_ended_episode_s_uid_goes_to_the_next_one(no_leftover_env_processes):
    # The lowest free uid each time: a few lock files cover a server's life, whatever its episode count.
    if os.geteuid() != 0:
        skip_or_fail_under_ci("envs get uids of their own only from a server running as root (CI runs as root)")
    failing = SandboxSpec("missing", TOY, ("/no-such-command-of-corral",))

    async def check() -> None:
        provider = LocalProvider()
        try:
            first = await provider.start(TOY_SPEC)
            await first.close()
            with pytest.raises(SandboxError):
                await provider.start(failing)
            second = await provider.start(TOY_SPEC)
            assert second.uid == first.uid is not None
            await first.close()  # again: it must not end the episode that has its uid now
            await second.send_line(jsonrpc.encode(jsonrpc.request("1", "ping")))
            assert jsonrpc.decode(await second.read_line()) == {"jsonrpc": "2.0", "id": "1", "result": {}}
        finally:
            await provider.aclose()

    asyncio.run(check())


# A process the agent leaves behind, waiting for the verifier's copy of its folder (verify-1/work,
# a name it can guess, writable by the episode's user) to write a file of its choosing there.
FORGER = """
import os, time
copy = os.path.join(os.path.dirname(os.getcwd()), "verify-1", "work")
print("left", flush=True)
while True:
    try:
        with open(os.path.join(copy, "forged"), "w") as forged:
            forged.write("1")
    except OSError:
        pass
    time.sleep(0.001)
"""


@pytest.mark.bwrap
def test_a_local_verifier_runs_once_every_process_the_agent_left_is_gone(no_leftover_env_processes):
    code = (
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {FORGER!r}], start_new_session=True); input()"
    )
    spec = SandboxSpec("leaves", TOY, ("python3", "-c", code))

    async def check() -> None:
        provider = LocalProvider()
        try:
            sandbox = await provider.start(spec)
            assert await sandbox.read_line() == b"left"
            verified = await sandbox.verify({}, lambda files: ["sh", "-c", "test ! -e forged"], timeout_s=30)
            assert verified.exit_code == 0, "a process the agent left wrote into the verifier's copy"
        finally:
            await provider.aclose()

    asyncio.run(check())


@pytest.mark.bwrap
def test_as_root_the_env_s_files_are_copied_readable_by_every_uid_keeping_what_runs(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail_under_ci("a server copies an env's folder for its uids only as root (CI runs as root)")
    env = tmp_path / "toy"
    shutil.copytree(TOY, env)
    (env / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (env / "notes.txt").write_text("root's alone\n")
    os.chmod(env / "run.sh", 0o700)
    os.chmod(env / "notes.txt", 0o600)
    spec = SandboxSpec("toy", env, TOY_SPEC.command)

    async def check() -> None:
        provider = LocalProvider()
        try:
            await provider.prepare(spec)
            copy, sdk = (Path(path) for path in provider.files.import_path(spec))
            modes = [stat.S_IMODE(path.stat().st_mode) for path in (copy, copy / "run.sh", copy / "notes.txt")]
            assert modes == [0o755, 0o755, 0o644]  # the folder, the executable, the file root alone could read
            assert stat.S_IMODE((sdk / "corral" / "errors.py").stat().st_mode) == 0o644
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_line_sent_to_an_exited_env_raises_even_while_a_process_it_left_holds_its_stdin(no_leftover_env_processes):
    # Without namespaces nothing ends the child with the env, and the pipe stays open.
    spec = SandboxSpec(
        "leaver", TOY, ("python3", "-c", "import subprocess, sys; subprocess.Popen(['sleep', '60']); sys.exit(3)")
    )

    async def check() -> None:
        provider = LocalProvider(unsafe_local_shell=True)
        provider.bubblewrap = None
        try:
            sandbox = await provider.start(spec)
            async with asyncio.timeout(30):
                while sandbox.alive:
                    await asyncio.sleep(0.05)
            with pytest.raises(EOFError, match=r"has exited \(status 3\)"):
                await sandbox.send_line(b"{}")
        finally:
            await provider.aclose()

    asyncio.run(check())


@pytest.mark.bwrap
def test_a_local_env_line_longer_than_the_limit_ends_the_stream(monkeypatch, no_leftover_env_processes):
    monkeypatch.setattr(local_sandbox_module, "LINE_LIMIT", 4096)
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
    ran = subprocess.run(
        [sys.executable, "-S", "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {code}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == str(tmp_path / "corral/errors.py")


@pytest.mark.bwrap
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
