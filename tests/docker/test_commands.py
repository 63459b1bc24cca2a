"""Command verifiers in the docker sandbox: a fresh container of the env's image, with a copy
of the env's writable folders, none of the agent's processes, the verifier's files where
only root writes, and the verdict read from the engine."""

from __future__ import annotations

import asyncio

import pytest

from corral.sandboxes import CommandResult, SandboxSpec
from corral.sandboxes.docker.provider import DockerProvider
from corral.sandboxes.shared.users import AGENT_USER
from tests.docker.conftest import DOCKERBOX, containers

pytestmark = pytest.mark.docker
PROBE = DOCKERBOX / "envs/probe"
SPEC = SandboxSpec("probe", PROBE, ("python3", "-m", "corral.env", "env:Probe"), writable=("/data",))

# What the agent does in its container before its turn ends: a file in the writable folder, one
# in the scratch /tmp, and a process that keeps writing the time into the writable folder.
AGENT = (
    "echo kept > /data/kept; echo scratch > /tmp/scratch; "
    "setsid sh -c 'while :; do date +%s%N > /data/clock; sleep 0.01; done' < /dev/null > /dev/null 2>&1 & "
    "until [ -e /data/clock ]; do sleep 0.01; done"
)

CLOCK_STANDS_STILL = (
    'before=$(cat /data/clock); sleep 0.3; [ "$before" = "$(cat /data/clock)" ] && echo "the clock stands still"'
)
CHECK = """
id -u; pwd; cat /data/kept; ls /tmp
before=$(cat /data/clock); sleep 0.3; [ "$before" = "$(cat /data/clock)" ] && echo "the clock stands still"
{ echo changed > "$1/check.sh"; } 2>/dev/null || echo "cannot change the files"
touch "$1/new" 2>/dev/null || echo "cannot add files"
echo to-stderr >&2
exit 3
"""


async def in_a_probe_container(check, docker_engine) -> None:
    provider = DockerProvider()
    try:
        await provider.prepare(SPEC)
        sandbox = await provider.start(SPEC)
        await check(sandbox, provider)
    finally:
        await provider.aclose()


def act_as_the_agent(docker_engine, sandbox, command: str) -> str:
    run = docker_engine.api.exec_create(sandbox.container_id, ["sh", "-c", command], user=AGENT_USER)
    return docker_engine.api.exec_start(run["Id"]).decode()


def test_the_verifier_runs_on_a_copy_of_the_writable_folders_with_none_of_the_agent_s_processes(docker_engine):
    async def check(sandbox, provider) -> None:
        act_as_the_agent(docker_engine, sandbox, AGENT)
        result = await sandbox.verify(
            {"check.sh": CHECK.encode()}, lambda folder: ["sh", f"{folder}/check.sh", folder], timeout_s=30
        )
        said = result.output.splitlines()
        assert result.exit_code == 3 and "to-stderr" in said  # stderr too, wherever it fell among stdout's lines
        said.remove("to-stderr")
        assert said == ["1000", "/env", "kept", "the clock stands still", "cannot change the files", "cannot add files"]
        # In the agent's own container too, the clock has stopped: its writer was killed first.
        assert act_as_the_agent(docker_engine, sandbox, CLOCK_STANDS_STILL) == "the clock stands still\n"
        await provider.engine.drain()  # its removal was started when the verifier ended
        assert containers(docker_engine, corral_instance=provider.engine.instance, corral_purpose="verify") == []

    asyncio.run(in_a_probe_container(check, docker_engine))


def test_a_verifier_is_killed_at_its_deadline_and_a_missing_command_fails(docker_engine):
    async def check(sandbox, provider) -> None:
        slow = await sandbox.verify({}, lambda folder: ["sh", "-c", "echo started; sleep 60"], timeout_s=1)
        assert slow == CommandResult(None, "started\n")
        missing = await sandbox.verify({}, lambda folder: ["no-such-command"], timeout_s=30)
        assert missing.exit_code not in (0, None) and "no-such-command" in missing.output

    asyncio.run(in_a_probe_container(check, docker_engine))
