"""Three identities in a docker sandbox: the env's user, a user of the agent's own for what the
env runs and writes on its behalf (corral.env.agent), and the verifier in a container neither
ever ran in. The agent's commands can neither signal, trace nor open the env, nor write the
env's files, nor take the env's user back."""

from __future__ import annotations

import json

import pytest

from corral.client import Bundle
from tests.env_attacks import ATTACKS_ON_THE_ENV, config_planted_in_the_env_s_home

pytestmark = pytest.mark.docker


def test_the_agent_s_commands_run_as_a_user_of_their_own_with_no_capability(dockerbox_server):
    with Bundle(dockerbox_server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        seen = environment.shell(command="id -u; id -g; id -G; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status")
        env_uid = json.loads(environment.inspect())["uid"]

    assert seen.split("\n") == [
        "1001",
        "1000",
        "1000",
        *(f"Cap{kind}:\t0000000000000000" for kind in ("Inh", "Prm", "Eff", "Amb")),
        "[exit status 0]",
    ]
    assert env_uid == 1000


def test_the_env_s_home_is_its_own_and_the_agent_keeps_one_it_can_write(dockerbox_server):
    with Bundle(dockerbox_server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        home, statuses = config_planted_in_the_env_s_home(environment)

    assert home.startswith("/tmp/corral-env-home-"), home
    assert statuses[0] != "0" and statuses[1] == "0", statuses


@pytest.mark.parametrize("attack", ATTACKS_ON_THE_ENV)
def test_the_agent_s_commands_cannot_reach_the_env(dockerbox_server, attack):
    with Bundle(dockerbox_server.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        environment.keep(text="the env's own")
        answer = environment.shell(command=ATTACKS_ON_THE_ENV[attack])
        kept = environment.kept()
        environment.say(text="ok")
        reward = environment.get_reward()

    assert not answer.endswith("[exit status 0]"), answer
    assert (kept, reward) == ("the env's own", 1.0)  # the env, untouched, still answers and scores
