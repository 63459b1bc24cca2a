"""An agent that leaves the bug in place scores 0, whatever else it leaves behind (local sandbox).

Each attack of tests/attacks.py is played on shellfix-batching: code that ends the tests'
process with status 0, patches unittest, shadows standard-library modules, plants startup
hooks, leaves a process running to rewrite the tests, reads them, traces the runner... The
reference fix still scores 1, beside whatever odd files it is left with. The same attacks
run against the docker sandbox in tests/docker/test_forgery_docker.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.attacks import ATTACKS, HARMLESS, play
from tests.conftest import BUNDLES, serving, skip_or_fail_under_ci
from tests.servers import NOBODY
from tests.servers import serving as corral_serve

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


@pytest.fixture(scope="module", params=["as the tests' user", "as another user than root"])
def shellfix(request) -> Iterator[object]:
    """shellfix served locally: in this process, and (when the tests run as root, whose server
    gives each env a uid of its own) by a server running as nobody, whose envs are nobody too."""
    if request.param == "as the tests' user":
        yield from serving(BUNDLES / "shellfix", sandbox="local")
        return
    if os.geteuid() != 0:
        skip_or_fail_under_ci(
            "the tests run as another user than root, so no server here can run as another user (CI runs them as root)"
        )
    with corral_serve(BUNDLES / "shellfix", "--sandbox", "local", uid=NOBODY) as (url, _):
        yield SimpleNamespace(url=url)


def test_the_reference_fix_scores_1_and_the_bug_0(shellfix):
    assert (play(shellfix, [], fixed=True).reward, play(shellfix, []).reward) == (1.0, 0.0)


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_on_the_verdict_scores_0(shellfix, attack):
    ended = play(shellfix, ATTACKS[attack])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata["verifier_output"]["tests"]


@pytest.mark.parametrize("oddity", HARMLESS)
def test_a_fix_left_with_odd_files_still_scores_1(shellfix, oddity):
    ended = play(shellfix, HARMLESS[oddity], fixed=True)

    assert ended.reward == 1.0, ended.metadata["verifier_output"]["tests"]


def test_a_repository_bigger_than_the_sandbox_allows_is_not_verified(shellfix):
    ended = play(shellfix, ATTACKS["sparse files of 6 GB"], fixed=True)

    assert ended.reward == 0.0
    assert "nothing was verified" in ended.metadata["verifier_output"]["tests"]
