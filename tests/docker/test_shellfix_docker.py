"""shellfix in hardened containers: after the agent's last turn, the hidden tests run in a fresh
container holding a copy of its /repo, from a folder the agent's user cannot write, and decide
the score there (tests/docker/test_forgery_docker.py attacks that verdict)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from corral.client import Bundle
from tests.conftest import serving
from tests.integration.test_command_verifiers import FORGERIES, SHELLFIX, play, solution

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[Bundle]:
    for server in serving(SHELLFIX, sandbox="docker"):
        with Bundle(server.url, split="all") as bundle:
            yield bundle


@pytest.mark.parametrize("task_id", ["shellfix-median", "shellfix-shopcart"])
def test_the_fix_scores_1_and_the_unfixed_repository_0_in_a_container(shellfix_docker, task_id):
    fixed = play(shellfix_docker, task_id, ("replace_in_file", solution(task_id)))
    unfixed = play(shellfix_docker, task_id)

    assert (fixed, unfixed) == (1.0, 0.0)


def test_forged_tests_in_the_container_do_not_change_the_verdict(shellfix_docker):
    forge = [("write_file", {"path": path, "content": text}) for path, text in FORGERIES.items()]

    unfixed = play(shellfix_docker, "shellfix-paginate", *forge)
    fixed = play(shellfix_docker, "shellfix-paginate", *forge, ("replace_in_file", solution("shellfix-paginate")))

    assert (unfixed, fixed) == (0.0, 1.0)


def test_the_agent_works_in_its_repository_as_a_user_who_cannot_touch_the_image_or_the_copied_tests(shellfix_docker):
    environment = shellfix_docker.factory()
    environment.reset(**next(row for row in shellfix_docker.dataset if row["task_id"] == "shellfix-median"))

    seen = environment.bash(command="pwd; ls; id -u; touch /env/planted 2>/dev/null || echo read-only")

    assert seen == "/repo\nstats.py\n1001\nread-only\n[exit status 0]"  # the agent's own user (shared.users)
    assert environment.get_reward() == 0.0


def test_a_timed_out_command_and_what_it_left_in_the_background_are_stopped_across_users(shellfix_docker):
    # The env (uid 1000) stops the agent's processes (uid 1001): it keeps the capability to signal.
    environment = shellfix_docker.factory()
    environment.reset(**next(row for row in shellfix_docker.dataset if row["task_id"] == "shellfix-median"))

    timed_out = environment.bash(command="sleep 60 & sleep 60", timeout_s=1)
    # Killed, each `sleep` is handed to the env, PID 1, which reaps it (corral.env.orphans).
    deadline, left = time.monotonic() + 10, None
    while left != "0\n[exit status 1]" and time.monotonic() < deadline:
        left = environment.bash(command="grep -c '^sleep$' /proc/[0-9]*/comm | grep -c ':1$'")

    assert timed_out.startswith("[timed out after 1s")
    assert left == "0\n[exit status 1]"
