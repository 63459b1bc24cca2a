"""An agent that leaves the bug in place scores 0 in the docker sandbox, whatever else it
leaves behind: the attacks of tests/attacks.py, as tests/integration/test_forgery.py plays
them locally. Here the tests run in a fresh container made from a copy of the agent's
/repo, with none of its processes, as the env's user, from a folder only root writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.attacks import ATTACKS, HARMLESS, bash, play
from tests.conftest import BUNDLES, serving

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "shellfix", sandbox="docker")


def test_the_reference_fix_scores_1_and_the_bug_0(shellfix_docker):
    assert (play(shellfix_docker, [], fixed=True).reward, play(shellfix_docker, []).reward) == (1.0, 0.0)


def test_the_repository_the_env_wrote_and_what_the_agent_adds_are_the_agent_s(shellfix_docker):
    owners = bash("stat -c %u:%g batching.py; touch new.py && stat -c %u new.py", "1001:1000\n1001\n[exit status 0]")

    assert play(shellfix_docker, [owners], fixed=True).reward == 1.0  # corral.env.agent: see test_agent_identity


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_on_the_verdict_scores_0(shellfix_docker, attack):
    ended = play(shellfix_docker, ATTACKS[attack])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]["tests"]


@pytest.mark.parametrize("oddity", HARMLESS)
def test_a_fix_left_with_odd_files_still_scores_1(shellfix_docker, oddity):
    ended = play(shellfix_docker, HARMLESS[oddity], fixed=True)

    assert ended.reward == 1.0, ended.metadata["verifier_output"]["tests"]


def test_a_repository_bigger_than_its_tmpfs_can_hold_is_not_verified(shellfix_docker):
    ended = play(shellfix_docker, ATTACKS["sparse files of 6 GB"], fixed=True)

    assert ended.reward == 0.0
    assert "nothing was verified" in ended.metadata["verifier_output"]["tests"]
