"""Three identities in a local episode of a root server with bubblewrap, as in a docker sandbox:
the env's uid, a uid of the agent's own for what the env runs and writes on its behalf
(corral.env.agent) and a third for the verifier, each from the local uid range. The agent's
commands can neither signal, trace nor open the env, nor write or replace the env's files,
nor take the env's uid back; the verifier runs as no uid any of them ran as, yet reads every
file the agent made; and nothing of any of them outlives its episode (docs/sandboxes.md).

Each uid holds at most the env's `pids` processes (RLIMIT_NPROC), as a container's pids limit
bounds docker's: an agent's fork bomb, in its turn or in its code the tests import, took this
machine's pid space (400 processes where shellfix allows 128), and with it the next process of
every other episode and of the server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.client import Bundle
from corral.sandboxes.local.procs import UID_BASE, UID_COUNT
from tests.attacks import BUG, FIX, TASK, bash, play, write
from tests.conftest import BUNDLES, serving
from tests.env_attacks import ATTACKS_ON_THE_ENV as ENV_ATTACKS
from tests.env_attacks import ENV_UID, config_planted_in_the_env_s_home
from tests.episode_processes import bash as episode_bash
from tests.wire import called, opened, ws

DOCKERBOX = Path(__file__).resolve().parents[1] / "fixtures" / "dockerbox"
ATTACKS_ON_THE_ENV = {
    **ENV_ATTACKS,
    "its program": 'echo "raise SystemExit" > "${PYTHONPATH%%:*}/env.py"',  # the env's folder, first on its path
}
pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("no_leftover_env_processes", "as_root")]


@pytest.fixture(scope="module")
def probe():
    yield from serving(DOCKERBOX, sandbox="local", max_concurrent_envs=4)


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(BUNDLES / "shellfix", sandbox="local", max_concurrent_envs=4)


def test_the_agent_s_commands_run_as_a_uid_of_their_own_with_no_capability(probe):
    with Bundle(probe.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        seen = environment.shell(
            command=f"id -u; id -G; echo {ENV_UID}; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status"
        )

    agent_uid, groups, env_uid, *capabilities, status = seen.split("\n")
    assert status == "[exit status 0]", seen
    assert agent_uid != env_uid and groups == agent_uid, seen  # no group of the env's either
    assert all(UID_BASE <= int(uid) < UID_BASE + UID_COUNT for uid in (agent_uid, env_uid))  # no account's
    assert capabilities == [f"Cap{kind}:\t0000000000000000" for kind in ("Inh", "Prm", "Eff", "Amb")]


def test_the_env_s_home_is_its_own_and_the_agent_keeps_one_it_can_write(probe):
    with Bundle(probe.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        home, statuses = config_planted_in_the_env_s_home(environment)

    assert home.startswith("/tmp/corral-env-home-"), home
    assert statuses[0] != "0" and statuses[1] == "0", statuses


@pytest.mark.parametrize("attack", ATTACKS_ON_THE_ENV)
def test_the_agent_s_commands_cannot_reach_the_env(probe, attack):
    with Bundle(probe.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        environment.keep(text="the env's own")
        answer = environment.shell(command=ATTACKS_ON_THE_ENV[attack])
        kept = environment.kept()
        environment.say(text="ok")
        reward = environment.get_reward()

    assert not answer.endswith("[exit status 0]"), answer
    assert (kept, reward) == ("the env's own", 1.0)  # the env, untouched, still answers and scores


def test_the_verifier_runs_as_a_uid_of_its_own(shellfix):
    # The agent notes its uid and the env's; its module, imported by the hidden tests, says whose
    # the verifier runs as. Its fix still scores 1.
    says = "import os, sys; print('uids', open('uids').read().strip(), os.getuid(), file=sys.stderr)"
    ended = play(
        shellfix,
        [
            bash(
                f'echo $(id -u) {ENV_UID} > uids && echo "{says}" | cat - batching.py > b && '
                "cat b > batching.py && rm b"
            )
        ],
        fixed=True,
    )
    output = ended.metadata["verifier_output"]["tests"]

    assert ended.reward == 1.0, output
    agent_uid, env_uid, verifier_uid = output.split("uids ", 1)[1].split()[:3]
    assert len({agent_uid, env_uid, verifier_uid}) == 3, output
    assert UID_BASE <= int(verifier_uid) < UID_BASE + UID_COUNT, output


def test_the_verifier_reads_what_the_agent_made_private_and_nothing_is_left(shellfix):
    # Files of the agent's uid, some only it may read, one folder not even it: the copy (made as
    # the agent's uid) takes what it can, the tests pass on it, and the episode's folder goes whole.
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="notes/private.txt", content="mine")
        called(agent, "replace_in_file", **FIX)
        folder = Path(
            episode_bash(
                agent,
                "chmod 600 batching.py notes/private.txt && chmod 700 notes && mkdir locked && chmod 000 locked && pwd",
            )
        ).parent
        ended = called(agent, "end_turn", response="done")

    assert ended.reward == 1.0, ended.metadata["verifier_output"]["tests"]
    assert folder.name.startswith("shellfix-") and not folder.exists()


def test_the_env_reaps_the_orphans_the_agent_s_commands_leave(probe):
    # Orphans go to the namespace's first process, the env: unreaped, their zombies would add up.
    with Bundle(probe.url, split="probe") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        environment.shell(command="for i in 1 2 3 4 5; do sh -c 'sleep 0.2 & exit'; done")
        zombies = environment.shell(command="sleep 2; grep -l '^State:.Z' /proc/[0-9]*/status | wc -l")

    assert zombies == "0\n[exit status 0]"


# Forks up to 400 children that sleep, and says how many it could start.
FORKS = (
    "import os, sys, time\nforked = 0\nfor _ in range(400):\n    try:\n        pid = os.fork()\n"
    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20)\n        os._exit(0)\n"
    "    forked += 1\nprint('forked', forked, file=sys.stderr)\n"
)
PIDS = 128  # shellfix's [resources] pids


def test_the_agent_s_commands_start_no_more_processes_than_the_env_s_pids_limit(shellfix):
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="forks.py", content=FORKS)
        said = called(agent, "bash", command="python3 forks.py 2>&1").result
        ended = called(agent, "end_turn", response="done")

    forked = int(said.split("forked ", 1)[1].split()[0])
    assert forked < PIDS, said
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_the_agent_s_code_run_by_the_tests_starts_no_more_processes_than_that_either(shellfix):
    ended = play(shellfix, [write("batching.py", FORKS + BUG)])
    output = ended.metadata["verifier_output"]["tests"]

    assert int(output.split("forked ", 1)[1].split()[0]) < PIDS, output
    assert (ended.status, ended.reward) == ("scored", 0.0), output
