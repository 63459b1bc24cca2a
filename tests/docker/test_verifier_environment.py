"""A docker command verifier's environment: the image's ENV is not the agent's to shape (issue 38).

The verifier's fresh container is made from the env's image, so the image's ENV reached the
tests as it was: an image that names a file in the agent's reach in a start-up variable
(nvm's documented recipe sets BASH_ENV) ran the agent's code before the tests, and its
`exit 0` was the verdict; the processes corral starts in the agent's container to stop it and
copy its files (as the env's user) loaded the image's LD_PRELOAD from the agent's folder. Each
such variable the task did not set itself is now empty for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.server.serving.embedded import EmbeddedServer
from tests.conftest import serving
from tests.docker.test_adversary_identity import REACH_DOCKERFILE, REACH_ENV
from tests.wire import called, opened, ws

pytestmark = pytest.mark.docker

# Start-up variables naming files in /work, the agent's writable folder: bash's, and the
# loader's (a missing LD_PRELOAD library is only warned about, so the tests still run).
DOCKERFILE = REACH_DOCKERFILE + "ENV BASH_ENV=/work/.start.sh LD_PRELOAD=/work/start.so\n"
# Scores 1 when the agent's answer.txt holds 42, run by bash (which reads BASH_ENV first).
CHECK = 'command = ["bash", "-c", "test \\"$(cat answer.txt)\\" = 42"]\ntimeout_s = 30\n'


@pytest.fixture(scope="module")
def started_server(docker_engine, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("started") / "started"
    (root / "verifiers").mkdir(parents=True)
    (root / "verifiers" / "check.toml").write_text(CHECK)
    (root / "bundle.toml").write_text('name = "started"\n[defaults]\nverifiers = { check = "check" }\n')
    env = root / "envs" / "started"
    env.mkdir(parents=True)
    (env / "env.py").write_text(REACH_ENV)
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "env.toml").write_text('entry = "env:Reach"\nwritable = ["/work"]\n')
    (root / "tasks").mkdir()
    (root / "tasks" / "started.json").write_text('{"env": "started", "args": {}, "prompt": "Write 42 to answer.txt."}')
    yield from serving(Path(root), sandbox="docker")


@pytest.mark.parametrize(
    ("answer", "reward"), [("echo 41 > answer.txt", 0.0), ("echo 42 > answer.txt", 1.0)], ids=["wrong", "right"]
)
def test_a_start_up_file_the_image_names_in_the_agent_s_reach_does_not_change_the_verdict(
    started_server, answer, reward
):
    with ws(started_server) as socket:
        opened(socket, task_id="started")
        planted = called(socket, "shell", command=f"printf 'exit 0\\n' > /work/.start.sh && {answer}").result
        ended = called(socket, "end_turn", response="done")

    assert planted.endswith("[exit status 0]"), planted
    assert (ended.status, ended.reward) == ("scored", reward), ended.metadata
    # No process corral starts, in the agent's container (the copy's tar) or the fresh one, tries
    # to load the agent's library: the loader says so on stderr when it is missing, as here.
    assert "start.so" not in str(ended.metadata), ended.metadata
