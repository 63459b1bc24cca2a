"""What the local sandbox keeps apart, though it is no isolation boundary (docs/sandboxes.md).

An env gets none of the server's environment; as root, each episode's env runs as a uid of
its own, so no episode reads another's folder; nothing an episode started outlives it; a
restarted server removes what a killed one of its instance left; and a second server of an
instance that is served already refuses. Played with shellfix's `bash` tool, as an agent would.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import BUNDLES, FIXTURES, serving, skip_or_fail_under_ci
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
from tests.wire import called, opened, ws

SHELLFIX = BUNDLES / "shellfix"


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        skip_or_fail_under_ci("a server gives envs uids of their own only as root (CI runs the tests as root)")


as_root_only = pytest.mark.usefixtures("as_root")
SERVER_USERS = [pytest.param(None, id="root"), pytest.param(NOBODY, id="nobody")]


def bash(socket, command: str) -> str:
    """The output of `command` run by the episode's env, without its exit status line."""
    return called(socket, "bash", command=command).result.rsplit("\n", 1)[0]


def detached(socket, command: str, escape: str = "setsid") -> int:
    """Start `command` in a session of its own from the episode's env; its pid, once it has
    left bash's process group (killed before, it would not outlive the call)."""
    return int(bash(socket, f"{escape} {command} < /dev/null > /dev/null 2>&1 & p=$!; "
                            'until [ "$(cut -d" " -f6 /proc/$p/stat)" = "$p" ]; do sleep 0.01; done; echo $p'))


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether `pid` has ended (a zombie waiting for its parent counts) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


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
def test_as_root_an_episode_cannot_read_another_s_folder(shellfix):
    with ws(shellfix) as first, ws(shellfix) as second:
        opened(first, task_id="shellfix-median")
        opened(second, task_id="shellfix-median")
        folder = bash(first, "echo secret > secret.txt; pwd")

        uids = {bash(first, "id -u"), bash(second, "id -u")}
        read = bash(second, f"cat {folder}/secret.txt; ls {folder}; ls {Path(folder).parent.parent}")

    assert len(uids) == 2 and "0" not in uids
    assert read.count("Permission denied") == 3 and "secret" not in read.replace("secret.txt", "")


@pytest.mark.parametrize("escape", ["setsid", "setsid env -i"])
def test_a_detached_process_is_gone_once_its_episode_ends(shellfix, escape):
    if escape == "setsid env -i" and os.geteuid() != 0:
        skip_or_fail_under_ci("a process that clears its environment escapes a server that is not root "
                              "(docs/sandboxes.md; CI runs the tests as root)")
    with ws(shellfix) as socket:
        opened(socket, task_id="shellfix-median")
        pid = detached(socket, "sleep 600", escape)
        assert not gone(pid, timeout_s=0.5)  # it outlived its bash call
        called(socket, "end_turn", response="done")

    assert gone(pid)


@as_root_only
@pytest.mark.parametrize("uid", SERVER_USERS)
def test_a_restarted_server_removes_what_a_killed_one_of_its_instance_left(uid, tmp_path):
    port, instance = free_port(), f"isolation-{os.getpid()}-{uid}"
    first = corral_serve(SHELLFIX, port, "--sandbox", "local", "--instance", instance, uid=uid)
    try:
        with ws(SimpleNamespace(url=wait_until_serving(first, port))) as socket:
            opened(socket, task_id="shellfix-median")
            pid = detached(socket, "sleep 600")
            folder = Path(bash(socket, "pwd")).parent
            # The instance's folder: as root, each env's uid may pass through it to its own and
            # list nothing; a server of another user keeps it to itself.
            assert stat.S_IMODE(folder.parent.stat().st_mode) == (0o711 if uid is None else 0o700)
            assert stat.S_IMODE(folder.stat().st_mode) == (0o711 if uid is None else 0o700)  # the episode's
            assert stat.S_IMODE((folder / "stderr").stat().st_mode) == 0o600  # the env's last words: the server's
            kill(first)
        assert folder.is_dir() and not gone(pid, timeout_s=0.5)  # SIGKILL: nothing removed them

        second = corral_serve(SHELLFIX, port, "--sandbox", "local", "--instance", instance, uid=uid)
        try:
            wait_until_serving(second, port)
            assert gone(pid, timeout_s=1) and not folder.exists()
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
    assert (ran.returncode, ran.stdout.splitlines()) == (0, [
        "True 0o700",
        "could not start '/no-such-command' for env missing: [Errno 2] No such file or directory: '/no-such-command'",
    ]), ran.stderr


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

    assert re.fullmatch(rf"error: another corral server holds the instance '{instance}' on this machine .*"
                        r"serve this one with --instance OTHER_NAME \(or CORRAL_INSTANCE\)", error)
