"""Verifier commands beside the env: files copied in that the env's user cannot change, and
commands run as that user with a deadline."""

from __future__ import annotations

import asyncio

import pytest

from corral.sandboxes import CommandResult, SandboxSpec
from corral.sandboxes.docker_provider import DockerProvider
from tests.docker.conftest import DOCKERBOX

pytestmark = pytest.mark.docker
PROBE = DOCKERBOX / "envs/probe"


async def in_a_probe_container(check) -> None:
    provider = DockerProvider()
    try:
        spec = SandboxSpec("probe", PROBE, ("python3", "-m", "corral.env", "env:Probe"))
        await provider.prepare(spec)
        sandbox = await provider.start(spec)
        await check(sandbox)
    finally:
        await provider.aclose()


def test_put_files_gives_a_folder_the_env_user_reads_but_cannot_change(docker_engine):
    async def check(sandbox) -> None:
        folder = await sandbox.put_files({"tests/test_it.py": b"assert True\n", "notes.txt": b"hidden"})
        read = await sandbox.run(["cat", f"{folder}/notes.txt", f"{folder}/tests/test_it.py"], timeout_s=30)
        assert read.exit_code == 0 and read.output == "hiddenassert True\n"
        write = await sandbox.run(["sh", "-c", f"echo x > {folder}/notes.txt; touch {folder}/tests/new"], timeout_s=30)
        assert write.exit_code != 0 and write.output.count("Permission denied") == 2
        who = await sandbox.run(["sh", "-c", "id -u; pwd"], timeout_s=30)
        assert who.output.split() == ["1000", "/env"]

    asyncio.run(in_a_probe_container(check))


def test_run_reports_exit_codes_and_kills_a_command_at_its_deadline(docker_engine):
    async def check(sandbox) -> None:
        assert await sandbox.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=30) == CommandResult(3, "out\nerr\n")
        slow = await sandbox.run(["sh", "-c", "echo started; sleep 60"], timeout_s=1)
        assert slow.exit_code is None and slow.output == "started\n"
        missing = await sandbox.run(["no-such-command"], timeout_s=30)
        assert missing.exit_code == 127 and "could not run 'no-such-command'" in missing.output

    asyncio.run(in_a_probe_container(check))
