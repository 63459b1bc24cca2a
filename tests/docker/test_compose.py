"""compose.yaml, as an operator uses it: `docker-compose up -d --build` serves GridSim from a
container whose episodes run in containers on the host's engine, and `stop`/`down` leave
nothing running.

Each run is its own compose project on a free port, so it never touches a deployment (or
another run) on the same engine. Docker's build cache keeps a warm image build to seconds;
a cold one (apt, then the wheelhouse) takes a couple of minutes, hence the long timeout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from corral.client import Bundle
from tests.conftest import REPO, skip_or_fail_under_ci
from tests.docker.conftest import containers, free_port, poll

pytestmark = pytest.mark.docker

COLD_START_S = 600  # a first `up` builds the server image and the bundle's env image


class ComposeProject:
    """compose.yaml run as its own project on `port`: `docker-compose -p NAME ...`."""

    def __init__(self, engine, compose: str, port: int):
        self.engine = engine
        self.name = f"corraltest{uuid.uuid4().hex[:10]}"
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.instance = f"compose-{port}"  # compose.yaml's CORRAL_INSTANCE
        self._compose = compose
        # The file's defaults, whatever this shell sets: only the port is the test's choice.
        self._env = {
            k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "COMPOSE_", "MAX_CONCURRENT_ENVS"))
        }
        self._env["CORRAL_PORT"] = str(port)

    def __call__(self, *args: str, timeout_s: float = COLD_START_S) -> str:
        command = [self._compose, "--project-name", self.name, "--file", str(REPO / "compose.yaml"), *args]
        done = subprocess.run(
            command, check=False, cwd=REPO, env=self._env, capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def server(self) -> dict | None:
        """The server's container as the engine lists it (running or not), if there is one."""
        found = containers(self.engine, com_docker_compose_project=self.name)
        return found[0] if found else None

    def health(self) -> str:
        """`starting`, `healthy` or `unhealthy`; fails at once if the server exited."""
        state = self.engine.api.inspect_container(self.server()["Id"])["State"]
        if not state["Running"]:
            pytest.fail(f"the server exited ({state['ExitCode']}):\n{self('logs', '--no-color')}")
        return state["Health"]["Status"]

    def env_containers(self) -> list[dict]:
        """The env containers this project's server started on the host's engine."""
        return containers(self.engine, corral_instance=self.instance)


@pytest.fixture
def compose_project(docker_engine) -> Iterator[ComposeProject]:
    compose = shutil.which("docker-compose")
    if compose is None:
        skip_or_fail_under_ci(
            "docker-compose is not installed: run .ci/setup-machine (or apt-get install docker-compose)"
        )
    wheelhouse = [sys.executable, str(REPO / "docker" / "wheelhouse.py")]
    subprocess.run(wheelhouse, check=True, timeout=COLD_START_S)
    project = ComposeProject(docker_engine, compose, free_port())
    try:
        yield project
    finally:
        # Whatever the test did, leave the engine as it was.
        project("down", "--timeout", "60")
        for container in project.env_containers():
            docker_engine.api.remove_container(container["Id"], force=True)


@pytest.mark.timeout(2 * COLD_START_S)
def test_compose_serves_gridsim_in_docker_sandboxes_and_leaves_nothing_running(compose_project):
    project = compose_project
    project("up", "--detach", "--build")
    poll(lambda: project.health() == "healthy", timeout_s=COLD_START_S, what="the server's health check passing")

    with Bundle(project.url, split="eval") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        assert project.env_containers(), "the episode runs in no container of the host's engine"
        # The protocol runs over the env's socket, not the engine: its folder is mounted in the container.
        mounts = project.engine.api.inspect_container(project.env_containers()[0]["Id"])["Mounts"]
        assert [m["Destination"] for m in mounts if m["Type"] == "bind"] == ["/run/corral"]
        environment.submit_schedule(actions=[0] * 24)
        assert environment.end_turn(response="idle all day") == "The episode has ended."
        assert environment.get_reward() == pytest.approx(0.2)  # an idle day scores 0.2

        environment.reset(**env.dataset[1])  # left open: stopping the server must end it
        assert any(c["State"] == "running" for c in project.env_containers())
        project("stop")

    assert project.env_containers() == [], "the stopped server left env containers"
    # uvicorn ends by re-raising the SIGTERM it handled (143); a server that ignored it would
    # be killed at the end of the grace period (137).
    assert project.engine.api.inspect_container(project.server()["Id"])["State"]["ExitCode"] == 143
    logs = project("logs", "--no-color")
    assert "Application shutdown complete." in logs
    assert "talk over their attach streams" not in logs  # no fallback: the engine saw the socket folders
    project("down")
    assert project.server() is None
    assert project.env_containers() == []
