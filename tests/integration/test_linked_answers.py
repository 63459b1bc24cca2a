"""An answer linked to what a command verifier reads scores 0 in the local sandbox too: the
verifier's files sit beside the copy of the agent's folder (`../files/`), and /proc/self/fd/3
is the file a verifier opened first (local.verify, links.py; the docker side is played in
tests/docker/test_adversary_identity.py). Each of these scored 1.0 before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import serving
from tests.docker.test_adversary_identity import COMPARES, REACH_ENV
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")
LINKED_ANSWERS = {
    "to the verifier's files beside the copy": "ln -s ../files/expected.txt answer.txt",
    "to the verifier's first open file": "ln -s /proc/self/fd/3 answer.txt",
    "to that, through /dev/fd and another link": "ln -s /dev/fd/3 fd && ln -s fd answer.txt",
}


@pytest.fixture(scope="module")
def compare_local(tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("compare-local") / "compare"
    (root / "verifiers").mkdir(parents=True)
    (root / "verifiers" / "answer.toml").write_text(COMPARES)
    (root / "secret").mkdir()
    (root / "secret" / "expected.txt").write_text("the secret answer\n")
    (root / "bundle.toml").write_text('name = "compare"\n[defaults]\nverifiers = { answer = "answer" }\n')
    (root / "envs" / "reach").mkdir(parents=True)
    (root / "envs" / "reach" / "env.py").write_text(REACH_ENV)
    (root / "envs" / "reach" / "env.toml").write_text('entry = "env:Reach"\n')
    (root / "tasks").mkdir()
    (root / "tasks" / "answer.json").write_text('{"env": "reach", "args": {}, "prompt": "Answer in answer.txt."}')
    yield from serving(Path(root), sandbox="local")


def answered(server: EmbeddedServer, command: str):
    with ws(server) as socket:
        opened(socket, task_id="answer")
        assert called(socket, "shell", command=command).result.endswith("[exit status 0]")
        return called(socket, "end_turn", response="done")


@pytest.mark.parametrize("link", LINKED_ANSWERS)
def test_an_answer_linked_to_what_the_verifier_reads_scores_0_locally(compare_local, link):
    ended = answered(compare_local, LINKED_ANSWERS[link])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata
    assert "links the agent left lead where the verifier's own files are" in ended.metadata["verifier_output"]["answer"]


def test_the_answer_beside_links_elsewhere_still_scores_1_locally(compare_local):
    ended = answered(
        compare_local, "echo the secret answer > answer.txt && ln -s / root && ln -s . up && ln -s ../work w"
    )

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata
