"""The docker data path: corral's runtime talks over a Unix socket the server listens on in a
folder mounted into its container alone, with the container as hardened as ever; where the
engine cannot see the server's folders, the attach stream carries the protocol instead."""

from __future__ import annotations

import asyncio
import logging

import pytest

from corral.env import jsonrpc
from corral.sandboxes import SandboxSpec
from corral.sandboxes.docker import channel as channel_module
from corral.sandboxes.docker.provider import DockerProvider
from corral.sandboxes.shared.users import ID_CAPABILITIES
from tests.docker.conftest import DOCKERBOX

pytestmark = pytest.mark.docker
PROBE = SandboxSpec("probe", DOCKERBOX / "envs/probe", ("python3", "-m", "corral.env", "env:Probe"))
PLAIN_MCP = SandboxSpec(
    "plain", DOCKERBOX / "envs/plain", ("python3", "-c", "import sys; print(sys.stdin.readline().strip(), flush=True)")
)


async def ping(sandbox) -> dict:
    await sandbox.send_line(jsonrpc.encode(jsonrpc.request("p", "ping")))
    return jsonrpc.decode(await sandbox.read_line())


def test_the_env_talks_over_its_own_socket_in_a_container_as_hardened_as_ever(docker_engine):
    async def check() -> None:
        provider = DockerProvider()
        try:
            await provider.prepare(PROBE)
            sandbox = await provider.start(PROBE)
            assert sandbox.over_socket and await ping(sandbox) == {"jsonrpc": "2.0", "id": "p", "result": {}}
            folder = sandbox._channel.folder
            # Connected once, the socket's name is gone: nothing else can connect to the env's server.
            assert list(folder.iterdir()) == []
            inspected = docker_engine.api.inspect_container(sandbox.container_id)
            host = inspected["HostConfig"]
            assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in host["Mounts"]] == [
                (str(folder), "/run/corral", True)
            ]
            # Root with only the capabilities to become the env's user and start the agent's (shared.users).
            assert (
                host["NetworkMode"],
                host["ReadonlyRootfs"],
                host["CapDrop"],
                host["CapAdd"],
                inspected["Config"]["User"],
            ) == ("none", True, ["ALL"], ID_CAPABILITIES, "0:0")
            said = await call_tool(sandbox, "inspect")
            assert (said["interfaces"], said["uid"], said["root_writable"]) == (["lo"], 1000, False)
            await sandbox.close()
            assert not folder.exists()
        finally:
            await provider.aclose()
        assert not provider.channels.root.exists()

    asyncio.run(check())


async def call_tool(sandbox, name: str, **arguments) -> dict:
    await sandbox.send_line(jsonrpc.encode(jsonrpc.request("t", "tools/call", {"name": name, "arguments": arguments})))
    while (reply := jsonrpc.decode(await sandbox.read_line())).get("id") != "t":
        pass
    return reply["result"]["structuredContent"]


def test_an_env_with_its_own_command_keeps_the_attach_stream(docker_engine):
    async def check() -> None:
        provider = DockerProvider()
        try:
            await provider.prepare(PLAIN_MCP)
            sandbox = await provider.start(PLAIN_MCP)
            assert not sandbox.over_socket
            await sandbox.send_line(b"said over stdin")
            assert await sandbox.read_line() == b"said over stdin"
            await sandbox.close()
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_when_the_engine_cannot_see_the_socket_folder_the_attach_stream_carries_the_protocol(
    docker_engine, monkeypatch, caplog
):
    # As for a server in a container whose folder is not the host's: the engine finds no such path.
    settings = channel_module.Channel.container_settings

    def elsewhere(self):
        mount, environment = settings(self)
        return {**mount, "Source": f"/nowhere-on-this-host/{self.folder.name}"}, environment

    monkeypatch.setattr(channel_module.Channel, "container_settings", elsewhere)

    async def check() -> None:
        provider = DockerProvider()
        try:
            await provider.prepare(PROBE)
            with caplog.at_level(logging.WARNING, logger="corral.sandboxes.docker"):
                first, second = await provider.start(PROBE), await provider.start(PROBE)
            for sandbox in (first, second):
                assert not sandbox.over_socket and await ping(sandbox) == {"jsonrpc": "2.0", "id": "p", "result": {}}
            # corral's own: asyncio may warn here of a child whose loop an earlier test closed
            warnings = [
                r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("corral")
            ]
            assert len(warnings) == 1 and "talk over their attach streams" in warnings[0]
            assert "CORRAL_CHANNEL_DIR" in warnings[0]
            assert list(provider.channels.root.iterdir()) == []  # the refused channel's folder went
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_socket_folder_too_deep_for_a_socket_name_falls_back_with_the_fix(
    docker_engine, monkeypatch, tmp_path, caplog
):
    deep = tmp_path / ("d" * 100)  # a Unix socket's path holds at most 108 bytes
    monkeypatch.setenv(channel_module.DIRECTORY_VARIABLE, str(deep))

    async def check() -> None:
        provider = DockerProvider()
        try:
            await provider.prepare(PROBE)
            with caplog.at_level(logging.WARNING, logger="corral.sandboxes.docker"):
                sandbox = await provider.start(PROBE)
            assert not sandbox.over_socket and await ping(sandbox) == {"jsonrpc": "2.0", "id": "p", "result": {}}
            assert f"set {channel_module.DIRECTORY_VARIABLE} to a short folder" in caplog.text
        finally:
            await provider.aclose()

    asyncio.run(check())
