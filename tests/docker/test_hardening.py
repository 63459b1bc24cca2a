"""Episodes in hardened containers: scored as locally, cut off from the network, not root,
on a read-only root, and held to their limits without harming the server or other episodes."""

from __future__ import annotations

import json
import time

import pytest

from corral.client import Bundle
from corral.sandboxes.docker.sandbox import stop_reason
from tests.docker.conftest import containers, instance_of, poll

pytestmark = pytest.mark.docker


def test_a_gridsim_episode_in_a_container_scores_as_it_does_locally(gridsim_docker_server, docker_engine):
    with Bundle(gridsim_docker_server.url, split="eval") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        assert containers(docker_engine, corral_instance=instance_of(gridsim_docker_server), corral_env="gridsim")
        idle = json.loads(environment.submit_schedule(actions=[0] * 24))
        assert idle["submitted"] and idle["feasible"] and idle["profit_usd"] == 0.0
        assert environment.end_turn(response="idle all day") == "The episode has ended."
        assert environment.get_reward() == pytest.approx(0.2)


def test_the_env_sees_only_loopback_runs_as_non_root_and_can_write_only_scratch(dockerbox_server):
    with Bundle(dockerbox_server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        seen = json.loads(environment.inspect())
        assert seen["interfaces"] == ["lo"]
        assert seen["uid"] != 0
        assert seen["root_writable"] is False
        assert seen["scratch_writable"] is True
        environment.say(text="ok")
        assert environment.get_reward() == 1.0


def test_the_pids_limit_stops_a_process_flood_inside_the_container(dockerbox_server):
    with Bundle(dockerbox_server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        spawned = json.loads(environment.spawn(count=100))
        assert spawned["started"] < 32  # [resources] pids = 32 in the fixture's env.toml
        assert "Resource temporarily unavailable" in spawned["error"]


@pytest.mark.parametrize(
    ("attack", "arguments", "reason"),
    [
        ("fork_bomb", {}, "fork_bomb didn't answer within 5s"),
        ("hog", {"megabytes": 1000}, "killed for using more than its memory limit of 96 MB"),
    ],
)
def test_an_attack_on_the_limits_ends_only_its_own_episode_with_its_failure_score(
    dockerbox_server, docker_engine, attack, arguments, reason
):
    with Bundle(dockerbox_server.url, split="probe", tool_timeout=5) as env:
        attacker, bystander = env.factory(), env.factory()
        attacker.reset(**env.dataset[0])
        bystander.reset(**env.dataset[0])
        answer = getattr(attacker, attack)(**arguments)
        assert reason in answer
        assert attacker.get_reward() == 0.0  # the agent's doing: scored, never left out
        instance = instance_of(dockerbox_server)
        poll(
            lambda: len(containers(docker_engine, corral_instance=instance)) == 1,
            what="the attacker's container going while the bystander's stays",
        )

        bystander.say(text="ok")
        assert bystander.get_reward() == 1.0
        attacker.reset(**env.dataset[0])  # the server serves the next episode as ever
        attacker.say(text="ok")
        assert attacker.get_reward() == 1.0


def test_why_a_container_stopped_is_known_after_autoremove_took_it(docker_engine, dockerbox_server):
    # Env containers are created with AutoRemove, so once one is killed for its memory an
    # inspect may find nothing; the engine's events still say why.
    image = containers(docker_engine, corral_instance=instance_of(dockerbox_server))[0]["Image"]
    since = time.time()
    host_config = docker_engine.api.create_host_config(auto_remove=True, mem_limit="32m", memswap_limit="32m")
    hog = docker_engine.api.create_container(
        image, command=["python3", "-c", "b = bytearray(256 << 20)"], host_config=host_config
    )["Id"]
    docker_engine.api.start(hog)
    poll(lambda: not docker_engine.api.containers(all=True, filters={"id": hog}), what="the hog being removed")

    assert stop_reason(docker_engine.api, hog, since) == "oom"
