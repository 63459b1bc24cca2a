"""The local sandbox as a boundary: each episode in namespaces of its own (bubblewrap), attacked
from shellfix's `bash` tool as an agent would (docs/sandboxes.md).

No network (a listener on this machine's loopback, and corral's own API, stay out of reach);
no bundle folder, no other episode's folder, no server processes in sight; nothing left in
/tmp, /var/tmp or /dev/shm; nothing it started survives its episode or reaches the
verifier's copy. A server's folder another user made first is refused. Where bubblewrap
cannot run, an env that gives the agent a shell is refused, unless the operator opts out.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from corral.errors import ConfigError
from corral.sandboxes.docker.channel import Channels
from tests.attacks import BUG, FIX, TASK, play
from tests.conftest import BUNDLES, serving, skip_or_fail_under_ci
from tests.episode_processes import bash, detached, gone, tag
from tests.servers import NOBODY, corral_command, free_port, stop, wait_until_serving
from tests.wire import called, opened, ws

SHELLFIX = BUNDLES / "shellfix"
pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("no_leftover_env_processes")]


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(SHELLFIX, sandbox="local", max_concurrent_envs=4)


def test_the_server_says_its_local_sandbox_is_isolated(shellfix):
    assert httpx.get(shellfix.url + "/health", trust_env=False).json()["sandbox"]["isolated"] is True


def test_an_episode_cannot_connect_to_this_machine_s_loopback(shellfix):
    accepted: list[object] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)

        def accept() -> None:
            while not stopped.is_set():
                try:
                    accepted.append(listener.accept()[0])
                except TimeoutError:
                    continue

        stopped = threading.Event()
        waiter = threading.Thread(target=accept)
        waiter.start()
        ports = {"the listener": listener.getsockname()[1], "corral's API": int(shellfix.url.rsplit(":", 1)[1])}
        try:
            with ws(shellfix) as agent:
                opened(agent, task_id="shellfix-median")
                tried = {
                    name: bash(
                        agent,
                        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), "
                        "timeout=5); print('connected')\" 2>&1 | tail -1",
                    )
                    for name, port in ports.items()
                }
        finally:
            stopped.set()
            waiter.join()

    assert accepted == []
    assert tried == dict.fromkeys(ports, "ConnectionRefusedError: [Errno 111] Connection refused")


def test_an_episode_sees_neither_the_bundle_nor_another_episode(shellfix):
    with ws(shellfix) as first, ws(shellfix) as second:
        opened(first, task_id="shellfix-median")
        opened(second, task_id="shellfix-median")
        folder = Path(bash(first, "echo secret > secret.txt; pwd"))
        read = bash(second, f"cat {folder}/secret.txt; ls {folder.parent}; ls {SHELLFIX / 'tests'}; ls {SHELLFIX}")
        uids = {bash(first, "id -u"), bash(second, "id -u")}

    assert read.count("No such file or directory") == 4, read
    assert "secret" not in read.replace("secret.txt", "")
    if os.geteuid() == 0:  # a root server still gives each episode a uid of its own
        assert len(uids) == 2 and "0" not in uids


def test_an_episode_sees_only_its_own_processes(shellfix):
    with ws(shellfix) as agent:
        opened(agent, task_id="shellfix-median")
        listed = bash(agent, "for p in /proc/[0-9]*; do echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done")

    commands = dict(line.split(" ", 1) for line in listed.splitlines())
    # The env is the namespace's first process (no bubblewrap init, whose stdio the agent could open).
    assert commands["1"].startswith("python3 -m corral.env "), listed
    assert not [command for command in commands.values() if "pytest" in command or "corral serve" in command]
    assert len(commands) <= 8, listed  # the env, bash and its pipeline; nothing of this machine's


def test_an_episode_leaves_nothing_in_tmp_var_tmp_or_dev_shm(shellfix):
    word = tag()
    places = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    with ws(shellfix) as agent:
        opened(agent, task_id="shellfix-median")
        written = bash(agent, " && ".join(f"echo left > {place}/{word} && ls {place}/{word}" for place in places))
        called(agent, "end_turn", response="done")

    assert written.splitlines() == [str(place / word) for place in places]  # the agent did write them
    assert [place for place in places if (place / word).exists()] == []


@pytest.mark.parametrize("escape", ["setsid", "setsid env -i"])
def test_a_detached_process_is_gone_once_its_episode_ends(shellfix, escape):
    with ws(shellfix) as agent:
        opened(agent, task_id="shellfix-median")
        pid = detached(agent, escape)
        assert not gone(pid, timeout_s=0.5)  # it outlived its bash call
        called(agent, "end_turn", response="done")

    assert gone(pid)


def test_a_process_left_to_write_the_fix_into_the_verifier_s_copy_is_gone_and_scores_0(shellfix):
    # It waits for the copy the verifier makes of the agent's folder (verify-1/work, beside it)
    # and writes the fix there, over the bug the agent left; a forger that survived and could
    # see that folder would score 1.
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="fixed.txt", content=BUG.replace(FIX["old"], FIX["new"]))
        copy = Path(bash(agent, "mv fixed.txt /tmp/fixed.py && pwd")).parent / "verify-1" / "work"
        pid = detached(agent, "setsid env -i", f"while :; do /bin/cp /tmp/fixed.py {copy}/batching.py; done")
        ended = called(agent, "end_turn", response="done")  # the verifier ran within this call

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]["tests"]
    assert gone(pid, timeout_s=0.1)  # already when the verifier's copy was made
    assert play(shellfix, [], fixed=True).reward == 1.0  # what the forged file would have scored


@pytest.mark.parametrize("squat", ["another user's folder", "a symbolic link"])
def test_a_server_refuses_a_folder_another_user_made_first(squat, tmp_path):
    if os.geteuid() != 0:
        skip_or_fail_under_ci("making a folder of another user's needs root (CI runs the tests as root)")
    port = free_port()
    instance = f"squat-{port}"
    squatted = Path("/tmp") / f"corral-{instance}"
    if squat == "a symbolic link":
        squatted.symlink_to(tmp_path)
    else:
        squatted.mkdir()
        os.chown(squatted, NOBODY, NOBODY)
    command, environ = corral_command(
        "serve", str(SHELLFIX), "--port", str(port), "--sandbox", "local", "--instance", instance
    )
    try:
        ran = subprocess.run(
            command,
            env={**environ, "TMPDIR": "/tmp"},
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        squatted.unlink() if squatted.is_symlink() else squatted.rmdir()

    why = "is a symbolic link" if squat == "a symbolic link" else f"belongs to uid {NOBODY}, not to this server's uid 0"
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines()[-1] == (
        f"error: {squatted} {why}, so another user may have made it to read or replace what corral keeps there; "
        "remove it (and find out who made it), or serve with another --instance"
    )


def test_a_docker_server_refuses_a_socket_folder_another_user_made_first(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail_under_ci("making a folder of another user's needs root (CI runs the tests as root)")
    channels = Channels("squatted", directory=str(tmp_path))
    channels.root.mkdir(mode=0o777)
    os.chown(channels.root, NOBODY, NOBODY)

    with pytest.raises(ConfigError, match=rf"^{channels.root} belongs to uid {NOBODY}, not to this server's uid 0"):
        channels.reap()
    assert channels.open() is None and not channels.usable  # an unnamed server talks over the attach stream instead


@pytest.fixture(scope="module")
def without_bubblewrap():
    """A PATH with every program of /usr/bin but bwrap: the local sandbox's probe fails as on a
    machine without bubblewrap. In a folder every env's uid may read."""
    folder = Path(tempfile.mkdtemp(prefix="corral-no-bwrap-"))
    folder.chmod(0o755)
    for program in Path("/usr/bin").iterdir():
        if program.name != "bwrap":
            (folder / program.name).symlink_to(program)
    yield str(folder)
    shutil.rmtree(folder)


def test_without_bubblewrap_a_shell_is_refused_unless_the_operator_accepts_the_risk(without_bubblewrap):
    path = without_bubblewrap
    command, environ = corral_command("serve", str(SHELLFIX), "--sandbox", "local", "--port", str(free_port()))
    environ = {**environ, "PATH": path}
    refused = subprocess.run(command, env=environ, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: env shellfix gives the agent a shell or files (agent_shell in its env.toml) and the local sandbox "
        "cannot isolate it here: bubblewrap (bwrap) is not installed; install bubblewrap (apt-get install "
        "bubblewrap), serve with --sandbox docker, or accept the risk with --unsafe-local-shell"
    )

    port = free_port()
    command, _ = corral_command(
        "serve", str(SHELLFIX), "--sandbox", "local", "--port", str(port), "--unsafe-local-shell"
    )
    server = subprocess.Popen(
        command, env=environ, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        url = wait_until_serving(server, port)
        assert httpx.get(url + "/health", trust_env=False).json()["sandbox"]["isolated"] is False
        with ws(type("Server", (), {"url": url})) as agent:
            opened(agent, task_id="shellfix-median")
            assert bash(agent, f"ls -d {SHELLFIX}") == str(SHELLFIX)  # what the opt-out gives away
    finally:
        stop(server)


def test_without_bubblewrap_an_env_without_a_shell_is_served(without_bubblewrap):
    port = free_port()
    command, environ = corral_command("serve", str(BUNDLES / "gridsim"), "--sandbox", "local", "--port", str(port))
    server = subprocess.Popen(
        command,
        env={**environ, "PATH": without_bubblewrap},
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        url = wait_until_serving(server, port)
        assert httpx.get(url + "/health", trust_env=False).json()["sandbox"]["isolated"] is False
    finally:
        stop(server)
