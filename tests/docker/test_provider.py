"""The docker provider through the interface every provider shares: `prepare` refuses an env it
cannot build with the fix, and `status` counts live containers and warm ones per env."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from corral.errors import BundleInvalid, ImageError, SandboxError
from corral.sandboxes import ProviderStatus, SandboxSpec
from corral.sandboxes.docker.provider import DockerProvider
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle
from tests.conftest import FIXTURES
from tests.docker.conftest import DOCKERBOX, containers

pytestmark = pytest.mark.docker
PROBE = SandboxSpec("probe", DOCKERBOX / "envs/probe", ("python3", "-m", "corral.env", "env:Probe"))
PLAIN = SandboxSpec("plain", DOCKERBOX / "envs/plain", ("python3", "-m", "corral.env", "env:Plain"))


async def poll_status(provider: DockerProvider, wanted: ProviderStatus, timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):
        while provider.status() != wanted:
            await asyncio.sleep(0.1)


def test_status_counts_live_containers_and_warm_ones_per_env(docker_engine):
    async def check() -> None:
        provider = DockerProvider(warm_pool=1)
        try:
            assert provider.status() == ProviderStatus("docker", isolated=True, live=0, warm={})
            for spec in (PROBE, PLAIN):
                await provider.prepare(spec)
            cold = await provider.start(PROBE, {"corral.purpose": "status"})
            assert provider.status() == ProviderStatus("docker", isolated=True, live=1, warm={})

            provider.start_pools([PROBE, PLAIN])
            none_dry = {"probe": 0, "plain": 0}
            await poll_status(
                provider,
                ProviderStatus("docker", isolated=True, live=1, warm={"probe": 1, "plain": 1}, warm_dry=none_dry),
            )
            warm = await provider.start(PLAIN, {"corral.purpose": "status"})  # taken from the pool
            assert provider.status().live == 2 and provider.status().warm["plain"] == 0
            await poll_status(
                provider,
                ProviderStatus("docker", isolated=True, live=2, warm={"probe": 1, "plain": 1}, warm_dry=none_dry),
            )

            await cold.close()
            await warm.close()
            assert provider.status() == ProviderStatus(
                "docker", isolated=True, live=0, warm={"probe": 1, "plain": 1}, warm_dry=none_dry
            )
        finally:
            await provider.aclose()
        assert containers(docker_engine, corral_run=provider.engine.run_id) == []

    asyncio.run(check())


def test_prepare_refuses_an_env_without_a_dockerfile_naming_it_and_the_fix(docker_engine, tmp_path):
    folder = tmp_path / "nofile"
    shutil.copytree(DOCKERBOX / "envs/probe", folder, ignore=shutil.ignore_patterns("Dockerfile"))

    async def check() -> None:
        provider = DockerProvider()
        try:
            with pytest.raises(ImageError) as refused:
                await provider.prepare(SandboxSpec("nofile", folder, PROBE.command))
        finally:
            await provider.aclose()
        message = str(refused.value)
        assert message.startswith(f"env nofile has no Dockerfile in {folder}; add one (FROM an image with python3)")
        assert "or name a prebuilt image with `image = ...` in env.toml" in message

    asyncio.run(check())


def test_prepare_refuses_a_prebuilt_image_the_engine_lacks(docker_engine):
    async def check() -> None:
        provider = DockerProvider()
        try:
            spec = SandboxSpec("probe", PROBE.context_dir, PROBE.command, image="corral-test/absent:never")
            with pytest.raises(ImageError, match=r"env probe names image 'corral-test/absent:never'.*docker pull"):
                await provider.prepare(spec)
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_serving_under_docker_lists_every_env_that_cannot_be_built(docker_engine):
    # toybox's envs are made for local processes: neither has a Dockerfile.
    with pytest.raises(BundleInvalid) as refused:
        asyncio.run(ServedBundle.open(FIXTURES / "toybox", ServeOptions(sandbox="docker")))
    problems = {problem.file: problem.message for problem in refused.value.problems}
    for env in ("toy", "counter"):
        assert problems[f"toybox/envs/{env}"].startswith(f"env {env} has no Dockerfile in "), problems


async def output_of(sandbox, command: list[str]) -> str:
    process = await sandbox.exec(command)
    output = b""
    while chunk := await process.read():
        output += chunk
    await process.close()
    return output.decode()


def test_an_image_run_whole_keeps_its_own_environment_and_gets_an_init_that_reaps(docker_engine):
    # A Harbor task's image runs as a machine: its first process must reap the orphans the
    # agent's commands leave, since the image's own command will not; and its HOME is its own.
    whole = SandboxSpec("probe", PROBE.context_dir, ("sleep", "infinity"), writable_root=True, user="")

    async def check() -> None:
        provider = DockerProvider()
        try:
            for spec in (PROBE, whole):
                await provider.prepare(spec)
            env = await provider.start(PROBE, {"corral.session": "s1", "corral.episode": "e1"})
            assert env.name.endswith("-probe-s1-e1")  # what `docker ps` shows of an episode
            assert await output_of(env, ["sh", "-c", "echo $HOME $PYTHONDONTWRITEBYTECODE"]) == "/tmp 1\n"
            machine = await provider.start(whole, {"corral.purpose": "init"})
            # docker's init first, and the HOME of the image's USER
            assert await output_of(machine, ["sh", "-c", "cat /proc/1/comm; echo $HOME"]) == "docker-init\n/home/env\n"
            await machine.close()
            with pytest.raises(SandboxError, match="the container of env probe is closed"):
                await machine.exec(["true"])
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_container_that_cannot_start_or_that_exits_says_why_and_leaves_nothing(docker_engine):
    missing = SandboxSpec("probe", PROBE.context_dir, ("/no-such-command",))
    exiting = SandboxSpec("probe", PROBE.context_dir, ("sh", "-c", "echo leaving >&2; exit 3"))

    async def check() -> None:
        provider = DockerProvider()
        try:
            for spec in (missing, exiting):
                await provider.prepare(spec)
            with pytest.raises(SandboxError, match="could not start the container of env probe: .*no-such-command"):
                await provider.start(missing, {"corral.purpose": "missing"})
            sandbox = await provider.start(exiting, {"corral.purpose": "exits"})
            with pytest.raises(EOFError):
                await sandbox.read_line()
            async with asyncio.timeout(30):
                while "the container exited with code 3" not in sandbox.stderr_tail():
                    await asyncio.sleep(0.1)
            assert "leaving" in sandbox.stderr_tail()
            await sandbox.close()
        finally:
            await provider.aclose()
        assert containers(docker_engine, corral_run=provider.engine.run_id) == []

    asyncio.run(check())
