"""Nothing outlives its use: a killed server's containers go by themselves, and what would not
goes when a server of its instance starts (no other server's does); a stopped server removes
its own; two servers never hold one instance; a client that drops its socket loses its
container at once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid

import docker.errors
import pytest

from corral.client import Bundle
from corral.sandboxes.docker.engine import Engine, remove_container
from corral.sandboxes.docker.lease import Lease
from corral.sandboxes.docker.whole_image.keeper import start_keeper
from tests.docker.conftest import DOCKERBOX, containers, free_port, instance_of, poll, reset, ws
from tests.servers import corral_serve, kill, stop, wait_until_serving
from tests.servers import instance_of as instance_of_port

pytestmark = pytest.mark.docker


def start_server(port: int, *options: str) -> subprocess.Popen:
    server = corral_serve(DOCKERBOX, port, "--sandbox", "docker", *options)
    wait_until_serving(server, port)
    return server


def test_a_killed_server_leaves_no_container_even_when_it_never_starts_again(docker_engine):
    port = free_port()
    instance = instance_of_port(port)
    server = start_server(port)
    try:
        url = f"http://127.0.0.1:{port}"
        with ws(url) as first, ws(url) as second:
            reset(first)
            reset(second)
            assert len(containers(docker_engine, corral_instance=instance)) == 2
            kill(server)
        # Their env reads end-of-file on stdin and exits; AutoRemove does the rest. The lease goes too.
        poll(
            lambda: containers(docker_engine, corral_instance=instance) == [] and not lease_of(docker_engine, instance),
            timeout_s=30,
            what="the killed server's containers and lease going by themselves",
        )
    finally:
        kill(server)


def test_a_started_server_removes_what_a_killed_one_of_its_instance_left_and_nobody_else_s(
    docker_engine, dockerbox_server
):
    port = free_port()
    instance = instance_of_port(port)
    neighbour = Bundle(dockerbox_server.url, split="probe")  # another server's episode, left alone
    playing = neighbour.factory()
    playing.reset(**neighbour.dataset[0])
    # A container of this instance whose process does not end with its server's stream (an env
    # that ignores end-of-file on stdin) outlives a killed server, until one of its instance starts.
    image = containers(docker_engine, corral_instance=instance_of(dockerbox_server))[0]["Image"]
    left = docker_engine.api.create_container(
        image, entrypoint=["sleep", "600"], command=[], labels={"corral.instance": instance, "corral.run": "killed"}
    )
    docker_engine.api.start(left["Id"])
    server = start_server(port)
    try:
        assert containers(docker_engine, corral_run="killed") == []
        with ws(f"http://127.0.0.1:{port}") as socket_:
            reset(socket_)
            assert len(containers(docker_engine, corral_instance=instance)) == 1
        stop(server)
        assert server.returncode == -signal.SIGTERM
        assert containers(docker_engine, corral_instance=instance) == []  # a stopped server removes its own

        playing.say(text="ok")  # the neighbour's container outlived both the reaping and the stop
        assert playing.get_reward() == 1.0
    finally:
        neighbour.close()
        kill(server)
        remove_container(docker_engine.api, left["Id"])


def test_a_second_server_of_an_instance_that_is_served_refuses(docker_engine):
    first_port, second_port = free_port(), free_port()
    first = start_server(first_port, "--instance", f"twice-{first_port}")
    try:
        second = corral_serve(DOCKERBOX, second_port, "--sandbox", "docker", "--instance", f"twice-{first_port}")
        try:
            assert second.wait(60) == 2
        finally:
            kill(second)
        error = second.stderr.read().decode().strip().splitlines()[-1]
    finally:
        stop(first)

    assert error == (
        f"error: another corral server holds the instance 'twice-{first_port}' on this Docker engine (its "
        f"container corral-twice-{first_port}-lease is running); stop that server, or serve this one with "
        "--instance OTHER_NAME (or CORRAL_INSTANCE)"
    )


def lease_of(docker_engine, instance: str) -> list[dict]:
    return docker_engine.api.containers(all=True, filters={"label": f"corral.lease={instance}"})


def test_a_client_dropping_its_socket_mid_episode_loses_its_container_at_once(dockerbox_server, docker_engine):
    instance = instance_of(dockerbox_server)
    socket_ = ws(dockerbox_server.url)
    episode = reset(socket_)
    assert len(containers(docker_engine, corral_instance=instance, corral_episode=episode)) == 1
    socket_.socket.close()  # no close frame: the connection just drops
    poll(
        lambda: containers(docker_engine, corral_instance=instance, corral_episode=episode) == [],
        timeout_s=10,
        what="the dropped episode's container going",
    )


def test_a_lease_whose_first_start_the_engine_fails_is_taken_on_a_new_container(docker_engine, monkeypatch):
    # As a busy engine does now and then: "cannot start a stopped process".
    engine = Engine(instance=f"lease-{uuid.uuid4().hex[:8]}")
    starts = {"failed": 0}
    real_start = engine.api.start

    def start_failing_once(container, *args, **kwargs):
        if not starts["failed"]:
            starts["failed"] += 1
            raise docker.errors.APIError("500 Server Error", explanation="cannot start a stopped process: unknown")
        return real_start(container, *args, **kwargs)

    monkeypatch.setattr(engine.api, "start", start_failing_once)

    async def take_and_release() -> list[dict]:
        lease = await Lease.take(engine)
        held = lease_of(docker_engine, engine.instance)
        await lease.release()
        await engine.drain()
        await engine.close()
        return held

    held = asyncio.run(take_and_release())
    assert starts["failed"] == 1 and [c["State"] for c in held] == ["running"]
    poll(lambda: not lease_of(docker_engine, engine.instance), timeout_s=30, what="the lease going")


def test_a_keeper_s_volumes_carry_its_instance_and_go_with_the_reaping(docker_engine):
    # A Harbor task's tests get tmpfs volumes held by a keeper container (docker.whole_image.keeper); a
    # killed server leaves both, and a server of its instance starting reaps them.
    engine = Engine(instance=f"keeper-{uuid.uuid4().hex[:8]}", client=docker_engine)
    config = {"image": "debian:bookworm-slim", "host_config": {}, "labels": engine.labels}
    made: list[str] = []
    keeper = asyncio.run(
        start_keeper(
            engine, config, f"corral-{engine.instance}", {"/files": 16}, by_root_only=True, lifetime_s=120, made=made
        )
    )
    mine = {"label": [f"corral.instance={engine.instance}"]}
    assert [v["Name"] for v in docker_engine.api.volumes(filters=mine)["Volumes"]] == [keeper.volumes["/files"]]

    assert engine.reap({"corral.instance": engine.instance}) == 1

    assert containers(docker_engine, corral_instance=engine.instance) == []
    assert docker_engine.api.volumes(filters=mine)["Volumes"] in (None, [])


def test_a_removed_container_takes_its_images_anonymous_volumes_with_it(docker_engine, tmp_path):
    """An image may declare a VOLUME (a Harbor task's often does): the engine gives each container
    an anonymous volume there, on this machine's disk, which outlived the container (a fresh
    adversary left 101 MB behind per episode)."""
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nVOLUME /data\n")
    tag = f"corral-test-volume:{uuid.uuid4().hex[:8]}"
    docker_engine.images.build(path=str(tmp_path), tag=tag, rm=True)
    try:
        container = docker_engine.api.create_container(tag, command=["true"])["Id"]
        [volume] = [mount["Name"] for mount in docker_engine.api.inspect_container(container)["Mounts"]]
        remove_container(docker_engine.api, container)
        assert volume not in {found["Name"] for found in docker_engine.api.volumes()["Volumes"] or []}
    finally:
        docker_engine.images.remove(tag, force=True)
