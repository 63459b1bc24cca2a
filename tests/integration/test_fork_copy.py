"""`corral/episode/fork` by a copy of the files (`fork = "copy"`), on the local sandbox: a
shellfix episode forked three ways after two calls. Each copy holds the repository as it was
at the fork, diverges and is scored on its own, outlives its parent, and is a user and a tree
of its own that no other copy nor the parent can reach. tests/docker/test_fork_copy_docker.py
plays the same on docker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from corral.client.episode import Episode
from corral.errors import ServerError
from corral.protocol.frames import ForkRefusal
from corral.sandboxes.kubernetes.provider import KubernetesProvider
from corral.sandboxes.local.provider import LocalProvider
from corral.sandboxes.modal.provider import ModalProvider
from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import BUNDLES, serving, wait_for_no_env_processes
from tests.integration.test_command_verifiers import solution
from tests.integration.test_fork import episode_on, sessions_left, sessions_on

SHELLFIX = BUNDLES / "shellfix"
TASK = "shellfix-median"
NOTES = "notes.txt"


@pytest.fixture(scope="module")
def shellfix() -> Iterator[EmbeddedServer]:
    yield from serving(SHELLFIX, sandbox="local", max_concurrent_envs=5)


def bash(episode: Episode, command: str) -> str:
    return episode.call("bash", {"command": command}).answer


def forked_three_ways(server: EmbeddedServer) -> tuple[Episode, list[Episode]]:
    """A shellfix episode after two calls (a file written, then appended to), and 3 copies of it."""
    parent = episode_on(server, TASK)
    parent.call("write_file", {"path": NOTES, "content": "parent\n"})
    assert bash(parent, f"echo two >> {NOTES}") == "[exit status 0]"
    return parent, parent.fork(3)


def check_copies_play_on_their_own(parent: Episode, copies: list[Episode]) -> dict[str, str]:
    """Each copy holds the parent's files at the fork, changes its own only, and is scored on
    what it did; the parent, closed first, changes nothing of theirs. Each one's `pwd` and
    `id -u`, by name (parent, copy0...)."""
    every = {"parent": parent, **{f"copy{number}": copy for number, copy in enumerate(copies)}}
    seen = {name: bash(episode, "pwd; id -u; hostname") for name, episode in every.items()}
    fixed = solution(TASK)
    for number, copy in enumerate(copies):
        assert copy.call("read_file", {"path": NOTES}).answer == "parent\ntwo\n"
        assert (
            copy.call("read_file", {"path": "stats.py"}).answer == parent.call("read_file", {"path": "stats.py"}).answer
        )
        copy.call("write_file", {"path": NOTES, "content": f"copy {number}\n"})
    copies[0].call("replace_in_file", fixed)
    parent.call("write_file", {"path": "parent-only.txt", "content": "mine\n"})
    assert parent.call("read_file", {"path": NOTES}).answer == "parent\ntwo\n"  # untouched by its copies
    parent.end_turn("done")
    parent.session.close()  # its copies play on
    assert parent.reward == 0.0  # unfixed: copy 0's fix is not the parent's
    for number, copy in enumerate(copies):
        assert copy.call("read_file", {"path": NOTES}).answer == f"copy {number}\n"
        assert "No such file" in bash(copy, "cat parent-only.txt")
        copy.end_turn("done")
    assert [copy.reward for copy in copies] == [1.0, 0.0, 0.0]  # each scored on its own
    return seen


def test_a_shellfix_episode_forked_three_ways_after_two_calls_plays_on_in_each_copy(shellfix):
    parent, copies = forked_three_ways(shellfix)
    try:
        seen = check_copies_play_on_their_own(parent, copies)
    finally:
        for episode in (parent, *copies):
            episode.session.close()
    uids = {name: said.splitlines()[1] for name, said in seen.items()}
    assert len(set(uids.values())) == 4, uids  # each a user of its own
    assert sessions_left(shellfix) == 0
    assert wait_for_no_env_processes() == []
    assert shellfix.served is not None
    root = shellfix.served.provider.root
    deadline = time.monotonic() + 10
    while (
        folders := [entry.name for entry in root.iterdir() if entry.name not in ("lock", "shared")]
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert folders == []  # every episode's folder removed


def test_an_agent_in_a_copy_cannot_reach_the_files_of_another_copy_or_of_the_parent(shellfix):
    parent, copies = forked_three_ways(shellfix)
    try:
        folders = {
            name: bash(episode, "pwd").splitlines()[0]
            for name, episode in (("parent", parent), ("copy0", copies[0]), ("copy1", copies[1]))
        }
        assert len(set(folders.values())) == 3
        for reader, others in ((copies[1], ("parent", "copy0")), (parent, ("copy0", "copy1"))):
            for other in others:
                said = bash(reader, f"cat {folders[other]}/{NOTES}; echo x > {folders[other]}/{NOTES}")
                assert "parent" not in said and "[exit status 0]" not in said, (other, said)
        assert parent.call("read_file", {"path": NOTES}).answer == "parent\ntwo\n"
        assert copies[0].call("read_file", {"path": NOTES}).answer == "parent\ntwo\n"
    finally:
        for episode in (parent, *copies):
            episode.session.close()
    assert wait_for_no_env_processes() == []


def test_metadata_says_the_local_sandbox_forks_shellfix_by_a_copy(shellfix):
    assert httpx.get(f"{shellfix.url}/metadata", trust_env=False).json()["fork_modes"] == {"shellfix": "copy"}


def test_a_provider_that_cannot_copy_refuses_the_fork_naming_itself_and_the_fix(serve, monkeypatch):
    # As the kubernetes and modal providers are (their sandboxes keep Sandbox.copy_to's refusal).
    monkeypatch.setattr(LocalProvider, "copies", False)
    server = serve(SHELLFIX, sandbox="local", max_concurrent_envs=3)
    assert httpx.get(f"{server.url}/metadata", trust_env=False).json()["fork_modes"] == {}
    parent = episode_on(server, TASK)
    parent.call("write_file", {"path": NOTES, "content": "parent\n"})
    with pytest.raises(ServerError) as refused:
        parent.fork(2)
    assert refused.value.code == ForkRefusal.FORK_UNSUPPORTED
    assert "the local sandbox this server runs cannot copy" in str(refused.value)
    assert "--sandbox docker" in str(refused.value)
    assert sessions_on(server) == 1
    parent.session.close()
    assert [KubernetesProvider.copies, ModalProvider.copies] == [False, False]


def check_a_copy_lacks_what_the_parent_removed(server: EmbeddedServer) -> None:
    """The copy's folders are the parent's, not its own reset's with the parent's laid over."""
    parent = episode_on(server, TASK)
    try:
        assert bash(parent, "rm stats.py && touch left.txt && ls") == "left.txt\n[exit status 0]"
        (copy,) = parent.fork(1)
        assert bash(copy, "ls") == "left.txt\n[exit status 0]"
        copy.session.close()
    finally:
        parent.session.close()


def test_a_copy_lacks_what_the_parent_removed(shellfix):
    check_a_copy_lacks_what_the_parent_removed(shellfix)
