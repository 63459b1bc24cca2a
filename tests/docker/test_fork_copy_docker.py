"""`corral/episode/fork` by a copy of the files on docker: the shellfix scenario of
tests/integration/test_fork_copy.py, each copy a container of its own whose /repo was streamed
from the parent's; no container is left once all have ended."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import serving
from tests.docker.conftest import containers, instance_of, poll
from tests.integration.test_fork import sessions_on
from tests.integration.test_fork_copy import (
    NOTES,
    SHELLFIX,
    bash,
    check_a_copy_lacks_what_the_parent_removed,
    check_copies_play_on_their_own,
    forked_three_ways,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(SHELLFIX, sandbox="docker", max_concurrent_envs=5)


def test_a_shellfix_episode_forked_three_ways_after_two_calls_plays_on_in_each_container(
    shellfix_docker, docker_engine
):
    instance = instance_of(shellfix_docker)
    parent, copies = forked_three_ways(shellfix_docker)
    try:
        assert len(containers(docker_engine, corral_instance=instance)) >= 4
        seen = check_copies_play_on_their_own(parent, copies)
    finally:
        for episode in (parent, *copies):
            episode.session.close()
    hosts = {name: said.splitlines()[2] for name, said in seen.items()}
    assert len(set(hosts.values())) == 4, hosts  # each a container of its own
    assert sessions_on(shellfix_docker) == 0
    poll(lambda: containers(docker_engine, corral_instance=instance) == [], what="every container's removal")


def test_an_agent_in_a_copy_cannot_reach_the_parent_s_or_another_copy_s_files(shellfix_docker):
    parent, copies = forked_three_ways(shellfix_docker)
    try:
        copies[0].call("write_file", {"path": NOTES, "content": "copy 0\n"})
        # The same paths in every container, each its own: copy 0's write is not in copy 1's, nor
        # is any other process's tree reachable from it (no other container's process is there).
        said = bash(copies[1], f"cat /repo/{NOTES}; cat /proc/*/root/repo/{NOTES} 2>/dev/null | sort -u")
        assert "copy 0" not in said and said.startswith("parent\ntwo\n"), said
        assert parent.call("read_file", {"path": NOTES}).answer == "parent\ntwo\n"
    finally:
        for episode in (parent, *copies):
            episode.session.close()


def test_a_copy_lacks_what_the_parent_removed(shellfix_docker):
    check_a_copy_lacks_what_the_parent_removed(shellfix_docker)
