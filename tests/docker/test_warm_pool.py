"""Warm pools: a reset takes a container started before it, the pool refills, and a
container serves one episode only."""

from __future__ import annotations

import json

import httpx
import pytest

from corral.client import Bundle
from tests.docker.conftest import DOCKERBOX, containers, instance_of, name_of, poll, reset, ws

pytestmark = pytest.mark.docker


def test_a_reset_takes_a_warm_container_and_the_pool_refills(serve_docker, docker_engine):
    server = serve_docker(DOCKERBOX, warm_pool=2)
    instance = instance_of(server)

    def waiting() -> set[str]:
        return {
            c["Id"]
            for c in containers(docker_engine, corral_instance=instance, corral_env="probe", corral_pool="warm")
            if "-warm-" in name_of(c)
        }

    def ready() -> int:  # answering their ping: what a reset takes (a container exists before that)
        return httpx.get(f"{server.url}/health", timeout=10).json()["sandbox"]["warm"].get("probe", 0)

    poll(lambda: ready() == 2, what="two warm probe containers ready")
    warm = waiting()
    assert len(warm) == 2
    with ws(server.url) as socket_:
        episode = reset(socket_)
        # Labels are fixed at creation, so a claimed container carries its episode in its name.
        claimed = poll(
            lambda: [
                c for c in containers(docker_engine, corral_instance=instance) if name_of(c).endswith(f"-{episode}")
            ],
            what="the claimed container's rename",
        )
        assert claimed[0]["Id"] in warm
        refilled = poll(lambda: found if len(found := waiting()) == 2 else None, what="the pool refilling")
        assert claimed[0]["Id"] not in refilled

    with Bundle(server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        assert json.loads(environment.inspect())["interfaces"] == ["lo"]
        environment.say(text="ok")
        assert environment.get_reward() == 1.0
    poll(
        lambda: (
            not [c for c in containers(docker_engine, corral_instance=instance) if name_of(c).endswith(f"-{episode}")]
        ),
        what="the used container's removal",
    )

    server.stop()
    assert containers(docker_engine, corral_instance=instance) == []
