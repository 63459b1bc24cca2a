"""A trainer outlives its env host's hiccups: a full server is waited for within the bound it
sets, a restarted server costs the episode it cut only, and a stopped server leaves nothing."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from corral.client import Bundle, CapacityError, Session
from corral.protocol.frames import ResetData, ResetRequest
from tests.conftest import FIXTURES
from tests.servers import corral_serve, free_port, stop, wait_until_serving

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def test_a_reset_waits_for_a_free_session_within_the_bound_it_sets(serve):
    server = serve(FIXTURES / "toybox", max_concurrent_envs=1)
    holder = Session(server.url)
    holder.request(ResetRequest(data=ResetData(split="toy", index=0)), 60)
    with Bundle(server.url, split="toy", capacity_wait=30) as patient, Bundle(server.url, split="toy") as hasty:
        with pytest.raises(CapacityError, match="capacity_wait"):
            hasty.factory().reset(**hasty.dataset[0])
        threading.Timer(1.0, holder.close).start()  # the session frees up a second from now
        environment = patient.factory()
        environment.reset(**patient.dataset[0])
        environment.say(text="apple")
        assert environment.get_reward() == 1.0


def start_server(bundle: Path, port: int) -> subprocess.Popen:
    server = corral_serve(bundle, port, "--sandbox", "local", "--max-concurrent-envs", "16")
    wait_until_serving(server, port)
    return server


def processes_of(port: int) -> dict[int, str]:
    """Processes of the server on `port`'s episodes (they carry its instance in CORRAL_SANDBOX,
    see docs/sandboxes.md), whoever's child: pid -> the episode's marker (an episode in its
    namespace has several: bubblewrap, its namespace's init, the env)."""
    marker = f"CORRAL_SANDBOX={socket.gethostname()}-{port}/".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (variables := (entry / "environ").read_bytes()):
                found[int(entry.name)] = next(v for v in variables.split(b"\0") if v.startswith(marker)).decode()
        except OSError:
            continue
    return found


@pytest.fixture
def toybox_copy(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "toybox", tmp_path / "toybox"))


def test_a_restarted_server_costs_the_episode_it_cut_and_the_next_reset_plays(toybox_copy):
    port = free_port()
    server = start_server(toybox_copy, port)
    try:
        with Bundle(f"http://127.0.0.1:{port}", split="toy") as env:
            environment = env.factory()
            environment.reset(**env.dataset[0])
            server.kill()
            server.wait()
            server = start_server(toybox_copy, port)
            answer = environment.say(text="apple")  # the socket is gone, and the episode with it
            assert answer.startswith("The episode has ended. the server went away")
            assert environment.get_reward() is None
            environment.reset(**env.dataset[0])  # a new socket, a new session: training goes on
            environment.say(text="apple")
            assert environment.get_reward() == 1.0
            server.kill()  # and between episodes: the idle socket the far end closed is replaced
            server.wait()
            server = start_server(toybox_copy, port)
            environment.reset(**env.dataset[0])
            environment.say(text="apple")
            assert environment.get_reward() == 1.0
    finally:
        stop(server)  # SIGTERM: this server also removes the folders the killed ones left
    deadline = time.monotonic() + 10  # the killed server's envs exit once their stdin closes
    while processes_of(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of(port) == {}


def test_sigterm_during_eight_live_episodes_leaves_nothing_running(toybox_copy):
    port = free_port()
    server = start_server(toybox_copy, port)
    sessions = [Session(f"http://127.0.0.1:{port}") for _ in range(8)]
    for session in sessions:
        session.request(ResetRequest(data=ResetData(split="toy", index=0)), 60)
    assert len(set(processes_of(port).values())) == 8  # eight episodes
    server.send_signal(signal.SIGTERM)
    assert server.wait(60) == -signal.SIGTERM  # shut down cleanly, then (uvicorn's way) ended by the signal
    assert b"Application shutdown complete" in server.stderr.read()
    assert processes_of(port) == {}
