"""Nothing outlives its use: a killed server's containers go when it starts again (and no
other server's do), a stopped server removes its own, and a client that drops its socket
loses its container at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from corral.client import Bundle
from tests.docker.conftest import DOCKERBOX, containers, free_port, instance_of, poll, reset, ws

pytestmark = pytest.mark.docker
CORRAL = Path(sys.executable).parent / "corral"


def start_server(port: int) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [str(CORRAL), "serve", str(DOCKERBOX), "--sandbox", "docker", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert server.poll() is None, "corral serve exited; run it by hand to see why"
        try:
            return httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    poll(healthy, timeout_s=120, what="corral serve answering /health")
    return server, url


def test_a_killed_server_leaves_no_container_once_it_starts_again(docker_engine, dockerbox_server):
    port = free_port()
    instance = f"{socket.gethostname()}-{port}"
    neighbour = Bundle(dockerbox_server.url, split="probe")  # another server's episode, left alone
    playing = neighbour.factory()
    playing.reset(**neighbour.dataset[0])
    first, url = start_server(port)
    try:
        with ws(url) as socket_:
            episode = reset(socket_)
            mine = containers(docker_engine, corral_instance=instance, corral_episode=episode)
            assert len(mine) == 1
            first_run = mine[0]["Labels"]["corral.run"]
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        assert containers(docker_engine, corral_run=first_run)  # nothing removed them: SIGKILL

        second, url = start_server(port)
        assert containers(docker_engine, corral_run=first_run) == []
        with ws(url) as socket_:
            reset(socket_)
            assert len(containers(docker_engine, corral_instance=instance)) == 1
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
        assert containers(docker_engine, corral_instance=instance) == []  # a stopped server removes its own

        playing.say(text="ok")  # the neighbour's container outlived both starts' reaping
        assert playing.get_reward() == 1.0
    finally:
        neighbour.close()
        for server in (first, locals().get("second")):
            if server is not None and server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def test_a_client_dropping_its_socket_mid_episode_loses_its_container_at_once(dockerbox_server, docker_engine):
    instance = instance_of(dockerbox_server)
    socket_ = ws(dockerbox_server.url)
    episode = reset(socket_)
    assert len(containers(docker_engine, corral_instance=instance, corral_episode=episode)) == 1
    socket_.socket.close()  # no close frame: the connection just drops
    poll(lambda: containers(docker_engine, corral_instance=instance, corral_episode=episode) == [],
         timeout_s=10, what="the dropped episode's container going")
