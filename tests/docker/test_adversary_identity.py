"""Attacks on the three identities of a docker sandbox (shared/users.py): the agent's commands
run as a user of their own, the env as another, the verifier in a fresh container. Each must
end the episode scored at the failure score (never null, never above it).

- Code the env imports (corral.env.agent.within_reach): a module planted where the env's
  Python looks for modules it has not imported yet: its working folder (a `writable` one),
  /tmp on PYTHONPATH. Both forged a 1 before corral's runtime left such folders off the env's
  import path. (A folder on the path that does not exist when the env starts is not looked
  in again: Python's importer cache remembers it as missing; the rule covers it all the same,
  tests/unit/test_agent_reach.py.)
- A Harbor task's root filled with empty files, which the engine's size (bytes only) counted as
  nothing: docker.whole_image.disk now counts each changed path at 4 KB at least. Fixed.
- A Harbor task's tests made to fill their own container's root (their python3 replaced by
  the agent, root there): the tests' container is watched as the agent's was. Fixed.

Held, as found (a fresh adversary's, beyond tests/attacks.py and test_adversary_docker.py):
- On the env (the probe's `shell`): a hard link to its file in /tmp, then written; a link the
  agent leaves where the env writes next; the env's root or working folder through /proc; a
  new user or PID namespace to signal the env from; a signal to every process from there.
- On shellfix's verdict (bug left, so each must score 0): a module of the fix kept in /dev/shm
  and linked from the repository (the tests' container has a /dev/shm of its own); a fork
  bomb left running in a new session when the turn ends, at the container's pids limit; the
  repository's own folder made unreadable (mode 000: nothing is copied, the tests fail);
  folders nested past PATH_MAX (fixed: the copy for verifying matched its exclusions at every
  depth, 100 s of tar's CPU per episode; anchored, it fails at once).
- Beside shellfix's fix (each must still score 1, so never unscored): a Unix socket, a
  setgid folder holding a setuid shell, file names with a newline or that read as tar
  options, 60,000 empty files (near the folder's inode bound).

- An answer linked to the expected one in a command verifier's files (/verifier/expected.txt,
  the same path every episode), or to /proc/self/fd/3 (the expected file, which the verifier
  opened first), directly or through another link: each read as the expected answer, 1.0.
  The files' folder is now named anew for each verification, and a link among the agent's
  files that leads into it, the verifier's HOME or /proc stops the verifier (docker.whole_image.links).
  Fixed.
- A Harbor task's tests made to fill their HOME, results and tests folders (engine volumes on
  this machine's disk, which docker.whole_image.disk does not see): each is now a tmpfs of bounded size
  (docker_snapshot_mounts). Fixed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sandboxes.docker.whole_image.disk import POLL_S
from corral.server.serving.embedded import EmbeddedServer
from tests.attacks import BUNDLES, bash, play
from tests.conftest import serving
from tests.docker.conftest import DOCKERBOX
from tests.docker.test_harbor_disk import LIMIT_MB, small_disk  # noqa: F401 - the fixture, shared
from tests.docker.test_harbor_disk import TASK as HARBOR_TASK
from tests.wire import called, opened, ws

pytestmark = pytest.mark.docker

# An env whose working folder is the agent's, with more of PYTHONPATH in the agent's reach, that
# imports a module of the standard library only when it reports, as an env's code may.
REACH_ENV = '''
import subprocess

from corral.env import Env, agent, tool


class Reach(Env):
    def reset(self, task: dict) -> None:
        self.said: list[str] = []

    @tool
    def say(self, text: str) -> str:
        """Say something; saying `ok` scores 1.

        Args:
            text: what to say.
        """
        self.said.append(text)
        return text

    @tool
    def shell(self, command: str) -> str:
        """Run `command` with sh as the agent.

        Args:
            command: the command line.
        """
        process = agent.popen(["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return process.communicate(timeout=20)[0].decode(errors="replace") + f"[exit status {process.returncode}]"

    def report(self) -> dict:
        import colorsys  # lazily: what Python finds first is what runs, as the env

        return {"said": self.said, "target": "ok", "hue": colorsys.rgb_to_hsv(1, 0, 0)[0]}
'''
REACH_DOCKERFILE = """FROM debian:bookworm-slim
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 \\
    && rm -rf /var/lib/apt/lists/* \\
    && useradd --create-home --uid 1000 env
COPY . /env
ENV PYTHONPATH=/env:/tmp
WORKDIR /work
"""
# Said "ok" for the agent, from inside the env process, wherever Python finds it.
FORGER = 'import gc\\nfor o in gc.get_objects():\\n    if type(o).__name__ == "Reach": o.said.append("ok")\\n'
FORGER += "def rgb_to_hsv(*rgb):\\n    return (0.0, 0.0, 0.0)\\n"
PLANTS = {
    "in the env's working folder": f"printf '{FORGER}' > /work/colorsys.py",
    "in /tmp, on PYTHONPATH": f"printf '{FORGER}' > /tmp/colorsys.py",
}


@pytest.fixture(scope="module")
def reach_server(docker_engine, tmp_path_factory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("reach") / "reach"
    shutil.copytree(DOCKERBOX / "verifiers", root / "verifiers")
    (root / "bundle.toml").write_text('name = "reach"\n[defaults]\nverifiers = { said = "said" }\n')
    env = root / "envs" / "reach"
    env.mkdir(parents=True)
    (env / "env.py").write_text(REACH_ENV)
    (env / "Dockerfile").write_text(REACH_DOCKERFILE)
    (env / "env.toml").write_text('entry = "env:Reach"\nwritable = ["/work"]\n')
    (root / "tasks").mkdir()
    (root / "tasks" / "reach.json").write_text('{"env": "reach", "args": {}, "prompt": "Say ok."}')
    yield from serving(Path(root), sandbox="docker")


@pytest.fixture(scope="module")
def shellfix_docker(docker_engine) -> Iterator[EmbeddedServer]:
    yield from serving(BUNDLES / "shellfix", sandbox="docker")


KEPT = "/tmp/kept-by-the-env"  # the probe env's own file (tests/fixtures/dockerbox/envs/probe)
ON_THE_ENV = {
    "a hard link to its file, then written": f"ln {KEPT} /tmp/mine && echo forged > /tmp/mine",
    "its root through /proc": "ls /proc/1/root/tmp",
    "its working folder through /proc": "ls /proc/1/cwd",
    "a new user namespace to signal it from": "unshare --user --map-root-user kill -INT 1",
    "a new PID namespace": "unshare --pid --fork --mount-proc kill -INT 1",
    "every process signalled": "kill -9 -1; kill -INT 1",
}
ON_THE_VERDICT = {
    "a fixed module in /dev/shm, linked from the repository": (
        "sed 's/ - size + 1//' batching.py > /dev/shm/batching.py; ln -sf /dev/shm/batching.py batching.py"
    ),
    "a fork bomb left running in a new session": "setsid sh -c 'b() { b | b & }; b' </dev/null >/dev/null 2>&1 & sleep 2",
    "the repository's folder made unreadable": "chmod 000 /repo",
    # Past PATH_MAX: the copy fails (the agent's doing) at once; it took 100 s of tar's CPU, past
    # end_turn's 60 s reply deadline here, while tar matched its exclusions at every depth.
    "folders nested 300 deep": "python3 -c \"import os\nfor _ in range(300): os.mkdir('n' * 40); os.chdir('n' * 40)\"",
    # Held in the fifth pass: the tests' HOME is a fresh tmpfs, and an import of a fifo fails.
    "startup files in HOME": (
        "d=$HOME/.local/lib/python3.11/site-packages && mkdir -p $d && echo 'import posix; posix._exit(0)' > $d/x.pth"
        " && printf '[core]\\n\\tfsmonitor = true\\n' > $HOME/.gitconfig"
    ),
    "a fifo in place of the module": "rm batching.py && mkfifo batching.py",
}
ODDITIES = {
    "a Unix socket": "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
    "a setgid folder holding a setuid shell": "mkdir sg && chmod 2777 sg && cp /bin/sh sg/sh && chmod 4755 sg/sh",
    "names with a newline or that read as tar options": (
        "touch \"$(printf 'a\\nb.py')\" -- '--checkpoint=1' '--checkpoint-action=exec=sh -c false' '-P'"
    ),
    "60,000 empty files": "mkdir many && cd many && seq 60000 | xargs touch",
}


@pytest.mark.parametrize("attack", ON_THE_ENV)
def test_the_agent_s_commands_cannot_reach_the_env_by_other_ways(dockerbox_server, attack):
    with ws(dockerbox_server) as socket:
        opened(socket, split="probe", index=0)
        called(socket, "keep", text="the env's own")
        answer = called(socket, "shell", command=ON_THE_ENV[attack]).result
        kept = called(socket, "kept").result
        called(socket, "say", text="ok")
        ended = called(socket, "end_turn", response="done")

    assert not answer.endswith("[exit status 0]") or "forged" not in kept, answer
    assert (kept, ended.status, ended.reward) == ("the env's own", "scored", 1.0), answer


@pytest.mark.parametrize("attack", ON_THE_VERDICT)
def test_an_attack_on_shellfix_s_verdict_scores_0(shellfix_docker, attack):
    ended = play(shellfix_docker, [bash(ON_THE_VERDICT[attack])])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata


@pytest.mark.parametrize("oddity", ODDITIES)
def test_shellfix_s_fix_beside_odd_files_still_scores_1(shellfix_docker, oddity):
    ended = play(shellfix_docker, [bash(ODDITIES[oddity])], fixed=True)

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata


def play_reach(server: EmbeddedServer, *steps: tuple[str, dict]):
    with ws(server) as socket:
        opened(socket, task_id="reach")
        answers = [called(socket, name, **arguments).result for name, arguments in steps]
        return answers, called(socket, "end_turn", response="done")


@pytest.mark.parametrize("where", PLANTS)
def test_a_module_planted_where_the_env_imports_from_does_not_run_as_the_env(reach_server, where):
    (planted,), ended = play_reach(reach_server, ("shell", {"command": PLANTS[where]}))

    assert planted.endswith("[exit status 0]"), planted
    assert (ended.status, ended.reward) == ("scored", 0.0), ended


def test_the_env_still_imports_its_own_code_and_scores_what_the_agent_said(reach_server):
    _, ended = play_reach(reach_server, ("say", {"text": "ok"}))

    assert (ended.status, ended.reward) == ("scored", 1.0), ended


def test_a_harbor_root_filled_with_empty_files_is_stopped_and_scores_0(small_disk):  # noqa: F811
    files = 2 * (LIMIT_MB << 20) // 4096  # twice the limit, at a block each
    with ws(small_disk) as socket:
        opened(socket, task_id=HARBOR_TASK)
        called(socket, "bash", command=f"mkdir /many && cd /many && seq {files} | xargs touch; sleep {4 * POLL_S:g}")
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended
    assert f"more than its limit of {LIMIT_MB} MB" in ended.metadata["verifier_output"]["reward"], ended.metadata


def test_tests_made_to_fill_their_own_container_are_stopped_and_score_0(small_disk):  # noqa: F811
    filler = f"#!/bin/sh\nhead -c {4 * LIMIT_MB}M /dev/zero > /filled-by-the-tests\nsleep 600\n"
    with ws(small_disk) as socket:
        opened(socket, task_id=HARBOR_TASK)
        called(
            socket,
            "bash",
            command=f"rm /usr/bin/python3 && printf '{filler}' > /usr/bin/python3 && chmod 755 /usr/bin/python3",
        )
        ended = called(socket, "end_turn", response="done")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended
    assert "the tests' copy of the agent's container" in ended.metadata["verifier_output"]["reward"], ended.metadata


def test_tests_made_to_fill_the_verifier_s_own_folders_are_bounded_and_score_0(small_disk):  # noqa: F811
    # python3, as the tests run it: four times the task's disk limit into each folder corral brings in.
    filler = (
        f"#!/bin/sh\nfor d in $HOME /logs/verifier /tests; do head -c {4 * LIMIT_MB}M /dev/zero > $d/fill; "
        "echo wrote $(wc -c < $d/fill) to $d; done; exit 1\n"
    )
    with ws(small_disk) as socket:
        opened(socket, task_id=HARBOR_TASK)
        called(
            socket,
            "bash",
            command=f"rm /usr/bin/python3 && printf '{filler}' > /usr/bin/python3 && chmod 755 /usr/bin/python3",
        )
        ended = called(socket, "end_turn", response="done")

    output = ended.metadata["verifier_output"]["reward"]
    written = [int(line.split()[1]) for line in output.splitlines() if line.startswith("wrote ")]
    assert len(written) == 3 and max(written) <= LIMIT_MB << 20, output
    assert (ended.status, ended.reward) == ("scored", 0.0), ended


# A command verifier that reads the agent's answer as data, the expected one still open (fd 3).
COMPARES = (
    'command = ["python3", "-I", "-c", "import sys; kept = open(sys.argv[1]); expected = kept.read(); '
    'sys.exit(open(\'answer.txt\').read() != expected)", "{files}/expected.txt"]\nfiles = ["secret"]\n'
)
LINKED_ANSWERS = {
    "to the expected answer where the verifier's files went last time": "ln -s /verifier/expected.txt answer.txt",
    "to the verifier's first open file": "ln -s /proc/self/fd/3 answer.txt",
    "to that, through another link": "ln -s /proc/self/fd/3 fd && ln -s fd answer.txt",
}


ENVS_KEY = "RUN echo the secret answer > /opt/key && chown env /opt/key && chmod 600 /opt/key\n"


@pytest.fixture(scope="module")
def compare_server(docker_engine, tmp_path_factory, request) -> Iterator[EmbeddedServer]:
    """The compare bundle; "keyed": its image also holds the answer in a file of the env's user,
    mode 600, which the agent's own user cannot read and the verifier (the env's user) can."""
    root = tmp_path_factory.mktemp("compare") / "compare"
    (root / "verifiers").mkdir(parents=True)
    (root / "verifiers" / "answer.toml").write_text(COMPARES)
    (root / "secret").mkdir()
    (root / "secret" / "expected.txt").write_text("the secret answer\n")
    (root / "bundle.toml").write_text('name = "compare"\n[defaults]\nverifiers = { answer = "answer" }\n')
    env = root / "envs" / "reach"
    env.mkdir(parents=True)
    (env / "env.py").write_text(REACH_ENV)
    (env / "Dockerfile").write_text(REACH_DOCKERFILE + (ENVS_KEY if getattr(request, "param", "") else ""))
    (env / "env.toml").write_text('entry = "env:Reach"\nwritable = ["/work"]\n')
    (root / "tasks").mkdir()
    (root / "tasks" / "answer.json").write_text('{"env": "reach", "args": {}, "prompt": "Answer in answer.txt."}')
    yield from serving(Path(root), sandbox="docker")


def answered(server: EmbeddedServer, command: str):
    with ws(server) as socket:
        opened(socket, task_id="answer")
        assert called(socket, "shell", command=f"cd /work && {command}").result.endswith("[exit status 0]")
        return called(socket, "end_turn", response="done")


@pytest.mark.parametrize("link", LINKED_ANSWERS)
def test_an_answer_linked_to_what_the_verifier_reads_scores_0(compare_server, link):
    ended = answered(compare_server, LINKED_ANSWERS[link])

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata


def test_the_answer_beside_links_elsewhere_still_scores_1(compare_server):
    ended = answered(
        compare_server, "echo the secret answer > answer.txt && ln -s /verifier v && ln -s / root && ln -s . up"
    )

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.metadata


@pytest.mark.parametrize("compare_server", ["keyed"], indirect=True)
def test_an_answer_linked_to_a_file_only_the_verifier_s_user_reads_scores_0(compare_server):
    """Issue 38's confused deputy, for a command verifier: it runs as the env's user, one uid
    below the agent's, and would read the env's 0600 file through the agent's link."""
    ended = answered(compare_server, "ln -s /opt/key answer.txt")

    assert (ended.status, ended.reward) == ("scored", 0.0), ended.metadata
