"""What the local sandbox keeps beside its namespaces (tests/integration/test_local_namespace.py;
docs/sandboxes.md).

An env gets none of the server's environment; a server killed with SIGKILL takes its episodes'
processes with it, and a restarted one removes the folders it left; a server of another user
than root works the same; and a second server of an instance that is served already refuses.
Played with shellfix's `bash` tool, as an agent would.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import BUNDLES, FIXTURES, serving, skip_or_fail_under_ci
from tests.episode_processes import bash, detached, gone
from tests.servers import (
    NOBODY,
    corral_command,
    corral_serve,
    free_port,
    kill,
    python_command,
    stop,
    wait_until_serving,
)
from tests.wire import opened, ws

SHELLFIX = BUNDLES / "shellfix"


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        skip_or_fail_under_ci("a server gives envs uids of their own only as root (CI runs the tests as root)")


as_root_only = pytest.mark.usefixtures("as_root")
SERVER_USERS = [pytest.param(None, id="root"), pytest.param(NOBODY, id="nobody")]


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(SHELLFIX, sandbox="local", max_concurrent_envs=4)


def test_an_env_gets_none_of_the_server_s_environment(monkeypatch):
    monkeypatch.setenv("CORRAL_TOKEN", "s3cret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-key")
    for server in serving(SHELLFIX, sandbox="local"):  # started with the secrets in its environment
        with ws(server) as socket:
            opened(socket, task_id="shellfix-median")
            seen = dict(line.split("=", 1) for line in bash(socket, "env").splitlines())

    shell_s_own = {"PWD", "SHLVL", "_"}
    assert set(seen) - shell_s_own == {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "CORRAL_SANDBOX"}
    assert "s3cret" not in repr(seen)
    assert seen["HOME"] == seen["PWD"]  # its own folder


@as_root_only
@pytest.mark.parametrize("uid", SERVER_USERS)
def test_a_restarted_server_removes_what_a_killed_one_of_its_instance_left(uid, tmp_path):
    port, instance = free_port(), f"isolation-{os.getpid()}-{uid}"
    first = corral_serve(SHELLFIX, port, "--sandbox", "local", "--instance", instance, uid=uid)
    try:
        with ws(SimpleNamespace(url=wait_until_serving(first, port))) as socket:
            opened(socket, task_id="shellfix-median")
            pid = detached(socket)
            folder = Path(bash(socket, "pwd")).parent
            # The instance's folder: as root, each env's uid may pass through it to its own and
            # list nothing; a server of another user keeps it to itself.
            assert stat.S_IMODE(folder.parent.stat().st_mode) == (0o711 if uid is None else 0o700)
            assert stat.S_IMODE(folder.stat().st_mode) == (0o711 if uid is None else 0o700)  # the episode's
            assert stat.S_IMODE((folder / "stderr").stat().st_mode) == 0o600  # the env's last words: the server's
            kill(first)
        # SIGKILL: nothing removed the folders; the episode's namespace died with the server
        assert folder.is_dir() and gone(pid)

        second = corral_serve(SHELLFIX, port, "--sandbox", "local", "--instance", instance, uid=uid)
        try:
            wait_until_serving(second, port)
            assert not folder.exists()
        finally:
            stop(second)
    finally:
        kill(first)


# A provider used on its own, as a library or a test uses it: no reap_leftovers before it starts an env.
ON_ITS_OWN = """
import asyncio, sys
from pathlib import Path
from corral.errors import SandboxError
from corral.sandboxes import LocalProvider, SandboxSpec

async def main():
    provider = LocalProvider()
    try:
        sandbox = await provider.start(SandboxSpec("toy", Path(sys.argv[1]), ("python3", "-m", "corral.env", "env:Toy")))
        print(sandbox.alive, oct(provider.root.stat().st_mode & 0o777))
        try:
            await provider.start(SandboxSpec("missing", Path(sys.argv[1]), ("/no-such-command",)))
        except SandboxError as error:
            print(error)
    finally:
        await provider.aclose()

asyncio.run(main())
"""


@as_root_only
def test_a_user_other_than_root_checks_a_bundle_and_starts_envs_in_a_folder_of_its_own():
    # What a laptop's user runs, though CI runs as root.
    command, environ = corral_command("check", str(SHELLFIX), "--sandbox", "local", uid=NOBODY)
    ran = subprocess.run(command, env=environ, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 env(s) (shellfix); tools bash, end_turn, read_file, replace_in_file, write_file" in ran.stdout

    command, environ = python_command("-c", ON_ITS_OWN, str(FIXTURES / "toybox/envs/toy"), uid=NOBODY)
    ran = subprocess.run(command, env=environ, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    assert (ran.returncode, ran.stdout.splitlines()) == (
        0,
        [
            "True 0o700",
            (
                "could not start '/no-such-command' for env missing: [Errno 2] No such file or directory in the sandbox's "
                "view: '/no-such-command'"
            ),
        ],
    ), ran.stderr


def test_a_second_server_of_an_instance_that_is_served_refuses():
    instance = f"isolation-{os.getpid()}-twice"
    first_port, second_port = free_port(), free_port()
    first = corral_serve(SHELLFIX, first_port, "--sandbox", "local", "--instance", instance)
    try:
        wait_until_serving(first, first_port)
        second = corral_serve(SHELLFIX, second_port, "--sandbox", "local", "--instance", instance)
        try:
            assert second.wait(60) == 2
        finally:
            kill(second)
        error = second.stderr.read().decode().strip().splitlines()[-1]
    finally:
        stop(first)

    assert re.fullmatch(
        rf"error: another corral server holds the instance '{instance}' on this machine .*"
        r"serve this one with --instance OTHER_NAME \(or CORRAL_INSTANCE\)",
        error,
    )
