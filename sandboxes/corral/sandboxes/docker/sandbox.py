"""One episode's env in a hardened Docker container.

The container is created with its stdin open, attached before it starts (so no byte of output is missed), then
started; corral's SDK goes in over stdin. The protocol then runs over a Unix socket the server listens on in a
folder shared with this container only (docker.channel), which skips the engine for every line; the attach stream
keeps the env's stderr. An env with its own command (any MCP stdio server) speaks over the attach stream's stdin and
stdout, as does every env when the engine cannot see the server's socket folders. Nothing connects to the container
over IP: its network is off unless the env opts in. Containers are created with AutoRemove, and their env reads
end-of-file when the server's socket or attach stream closes, so a killed server's containers end and vanish on
their own. Command verifiers run in a fresh container of their own (docker.verify), a fork's copy too (docker.copies).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import docker
import docker.errors

from corral.errors import ImageError, SandboxError
from corral.sandboxes.base import CommandResult, Sandbox, SandboxProcess, SandboxSpec
from corral.sandboxes.docker.channel import MISSING_SOURCE, Channel, Channels, read_line, write_line
from corral.sandboxes.docker.copies import copy_folders
from corral.sandboxes.docker.engine import Engine, container_name
from corral.sandboxes.docker.execs import Exec
from corral.sandboxes.docker.stream import MuxStream
from corral.sandboxes.docker.verify import startup_variables, stop_agent, verify_in_fresh_container
from corral.sandboxes.docker.whole_image.disk import watch_disk
from corral.sandboxes.docker.whole_image.snapshot import verify_snapshot
from corral.sandboxes.shared.bootstrap import bootstrapped, sdk_payload
from corral.sandboxes.shared.users import SCRATCH, env_user, launch, process_users, scratch_mounts

log = logging.getLogger("corral.sandboxes.docker")

DIE_EVENT_WAIT_S = 2.0  # after its stream ends, how long a container's `die` event is waited for
STDERR_WAIT_S = 2.0  # after the env's socket ends, how long its stderr may take to arrive (attach stream)
RENAME_AFTER_S = 0.05  # a claimed warm container is renamed after its reset's round trips, not during them
ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": SCRATCH}


def container_config(
    spec: SandboxSpec, image: str, *, name: str, labels: Mapping[str, str], api: docker.APIClient
) -> dict:
    """create_container's arguments: the hardening every env container gets, running `image`."""
    command = bootstrapped(spec.command) or spec.command
    user, capabilities, identities = launch(spec)
    host_config = api.create_host_config(
        network_mode="none" if spec.network == "none" else "bridge",
        nano_cpus=int(spec.resources.cpus * 1e9),
        mem_limit=f"{spec.resources.memory_mb}m",
        memswap_limit=f"{spec.resources.memory_mb}m",  # no swap: the limit is the limit
        pids_limit=spec.resources.pids,
        cap_drop=["ALL"],
        cap_add=capabilities or None,
        security_opt=["no-new-privileges"],
        # No log: the engine's default keeps all a container writes on its stdio in a file on this
        # machine's disk, without bound, and an agent of the env's user can write there (a
        # Harbor task's /proc/1/fd/1; a tool's error that quotes its arguments on the env's
        # stderr). The server reads both over the attach stream, keeping a bounded tail.
        log_config={"Type": "none", "Config": {}},
        # An image run whole (a Harbor task's) keeps its root writable and its /tmp in it, so a
        # verifier's copy (a commit, docker.whole_image.snapshot) holds everything the agent left.
        # Its first process is docker's init, which reaps the orphans of the agent's commands, and
        # the image's ENTRYPOINT is not run: `command` must be what keeps the container up.
        read_only=not spec.writable_root,
        tmpfs={} if spec.writable_root else scratch_mounts(spec),
        init=spec.writable_root or None,
        auto_remove=True,  # with stdin_open (and so StdinOnce), a killed server's containers go
    )
    return {
        "image": image,
        "command": list(command),
        "user": user,
        "stdin_open": True,
        "tty": False,
        **({"entrypoint": [""]} if spec.writable_root else {}),
        "environment": {**({} if spec.writable_root else ENVIRONMENT), **dict(spec.environment), **identities},
        "working_dir": spec.workdir,
        "name": name,
        "labels": dict(labels),
        "host_config": host_config,
        "use_config_proxy": False,
    }


class DockerSandbox(Sandbox):
    """A started container whose env process talks over `stream`; `on_close` is told when it
    closes (the provider's count of live sandboxes)."""

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        config: dict,
        spec: SandboxSpec,
        stream: MuxStream,
        on_close: Callable[[DockerSandbox], None],
        created_at: float,
        channel: Channel | None = None,
    ):
        self.engine = engine
        self.container_id = container_id
        self.config = config  # create_container's arguments: a verifier's container is made like it
        self.name = config["name"]
        self.spec = spec
        self._stream = stream
        self._channel = channel  # the protocol's socket; None: the attach stream's stdin and stdout
        self._model_socket = channel.model_socket() if channel is not None and spec.model_channel else None
        self._on_close = on_close
        self._created_at = created_at
        self._closed = False
        self._agent_stopped = False
        self._rename: asyncio.Task | None = None
        self._stopped_for: str | None = None  # why corral stopped the container, for its verifier's output
        limit_mb = spec.resources.disk_mb if spec.writable_root else None
        self._disk_watch = (
            None
            if limit_mb is None
            else asyncio.ensure_future(watch_disk(engine, container_id, limit_mb, self._stop_for))
        )

    @classmethod
    async def create(
        cls,
        engine: Engine,
        spec: SandboxSpec,
        image: str,
        *,
        name: str,
        labels: Mapping[str, str],
        on_close: Callable[[DockerSandbox], None],
        channels: Channels | None = None,
    ) -> DockerSandbox:
        """Create, attach and start a container of `image`; hand its env the SDK and, for
        corral's runtime while `channels` are usable, a socket of its own. Raises SandboxError."""
        config = container_config(spec, image, name=name, labels=labels, api=engine.api)
        while True:
            wanted = channels is not None and channels.usable and bootstrapped(spec.command)
            channel = channels.open() if wanted and channels is not None else None
            try:
                return await cls._create(engine, spec, config, on_close, channel)
            except _ChannelUnseen as unseen:
                assert channel is not None and channels is not None  # only an opened channel goes unseen
                await channel.close()
                channels.unreachable(str(unseen))  # then again, over the attach stream
            except BaseException:
                # Cancelled (a reset deadline, a dropped client) or failed half-way: whatever the
                # engine made under this name goes now. (A create still under way in its thread
                # when this removal runs finishes after it; the run's reap at shutdown takes that one.)
                engine.remove(name, name)
                if channel is not None:
                    await channel.close()
                raise

    @classmethod
    async def _create(
        cls,
        engine: Engine,
        spec: SandboxSpec,
        config: dict,
        on_close: Callable[[DockerSandbox], None],
        channel: Channel | None,
    ) -> DockerSandbox:
        api = engine.api
        created_at = time.time()
        try:
            container_id = (await engine.call(api.create_container, **with_channel(config, channel)))["Id"]
            hijacked = await engine.call(
                api.attach_socket, container_id, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            stream = await MuxStream.open(hijacked)
        except docker.errors.ImageNotFound:
            raise ImageError(
                f"env {spec.env_name}: image {config['image']} is missing; build it with `corral build BUNDLE`"
            ) from None
        except (docker.errors.APIError, RuntimeError, OSError) as error:
            detail = getattr(error, "explanation", None) or error
            if channel is not None and MISSING_SOURCE in str(detail):
                raise _ChannelUnseen(detail) from None
            raise SandboxError(f"could not create a container for env {spec.env_name}: {detail}") from None
        try:
            if channel is not None:
                channel.listen()
            await engine.call(api.start, container_id)
            if bootstrapped(spec.command):
                await stream.write(sdk_payload())
        except BaseException as error:
            await stream.close()
            if isinstance(error, (docker.errors.APIError, EOFError)):
                raise SandboxError(f"could not start the container of env {spec.env_name}: {error}") from None
            raise
        # The config kept is the container's without its channel: a verifier's container is made like it.
        return cls(engine, container_id, config, spec, stream, on_close, created_at, channel)

    @property
    def alive(self) -> bool:
        return not self._closed and not self._stream.ended.is_set()

    @property
    def over_socket(self) -> bool:
        """Whether the protocol runs over the server's Unix socket (else the attach stream)."""
        return self._channel is not None

    def claim(self, labels: Mapping[str, str]) -> None:
        """Take this warm container for an episode. Labels cannot change after creation, so the episode's
        session and episode ids go into the container's name, renamed in the background: a reset does not wait."""
        name = container_name(self.engine.instance, self.spec.env_name, labels)
        self._rename = asyncio.create_task(self._rename_to(name))

    async def _rename_to(self, name: str) -> None:
        await asyncio.sleep(RENAME_AFTER_S)
        with contextlib.suppress(docker.errors.APIError):
            await self.engine.call(self.engine.api.rename, self.container_id, name)
            self.name = name

    async def send_line(self, line: bytes) -> None:
        if self._channel is None:
            await self._stream.write(line + b"\n")
            return
        try:
            _, writer = await self._channel.connected(self._stream.ended)
            await write_line(writer, line)
        except EOFError:
            await self._explain_stop()
            raise

    async def read_line(self) -> bytes:
        try:
            if self._channel is None:
                return await self._stream.read_line()
            reader, _ = await self._channel.connected(self._stream.ended)
            return await read_line(reader)
        except EOFError:
            await self._explain_stop()
            raise

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return self._stream.stderr_tail(max_chars)

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
        **placement: Any,
    ) -> CommandResult:
        """In a fresh container, once the agent's processes are gone: see docker.verify, and
        docker.whole_image.snapshot for an image run whole (`writable_root`), which also takes `placement`
        (files_dir, results, user, environment: see Sandbox.verify)."""
        if self.spec.writable_root:
            result = await verify_snapshot(
                self.engine,
                self.spec,
                self.config,
                self.container_id,
                files,
                command,
                timeout_s=timeout_s,
                keep=max_output_chars,
                **placement,
            )
            if self._stopped_for is None:
                return result
            return CommandResult(result.exit_code, f"[corral] {self._stopped_for}\n{result.output}")
        if placement:
            raise SandboxError(
                f"env {self.spec.env_name}: {', '.join(placement)} need an image run whole "
                "(a Harbor task's); corral's envs put their verifier's files in a folder of its own"
            )
        return await verify_in_fresh_container(
            self.engine,
            self.spec,
            self.config,
            self.container_id,
            files,
            command,
            timeout_s=timeout_s,
            keep=max_output_chars,
            agent_stopped=self._stop_agent_once(),
        )

    async def exec(self, command: Sequence[str], *, stdin: bool = False) -> SandboxProcess:
        """`command` in this container beside the env, as the env's user in its working folder."""
        if self._closed:
            raise SandboxError(f"the container of env {self.spec.env_name} is closed")
        return await Exec.start(
            self.engine, self.container_id, command, user=env_user(self.spec), stdin=stdin, merged=True
        )

    async def copy_to(self, target: Sandbox) -> None:
        """Its writable folders streamed into `target`'s (its provider's): see docker.copies."""
        assert isinstance(target, DockerSandbox)
        await copy_folders(self.engine, self.spec, self.container_id, target.container_id)

    def _stop_for(self, reason: str) -> None:
        """Corral is stopping the container for `reason`: its stderr tail and its verifier say so."""
        self._stopped_for = reason
        self._stream.note(reason)

    async def _stop_agent_once(self) -> None:
        if not self._agent_stopped:
            emptied = await startup_variables(self.engine, self.config)
            await stop_agent(self.engine, self.container_id, process_users(self.spec), emptied)
            self._agent_stopped = True

    async def close(self) -> None:
        """Kill and remove the container (force remove), starting now; safe to call twice.

        The removal is handed to the engine's threads before anything is awaited, so a
        caller being cancelled (a dropped client) cannot stop it, and an episode's reward does
        not wait for it.
        """
        if self._closed:
            return
        self._closed = True
        for task in (self._rename, self._disk_watch):
            if task is not None:
                task.cancel()
        self._on_close(self)
        self.engine.remove(self.container_id, self.name)
        if self._channel is not None:
            await self._channel.close()
        await self._stream.close()

    async def _explain_stop(self) -> None:
        """The stream ended: note in the stderr tail why, e.g. the memory limit. The container
        may be gone already (AutoRemove), so the engine's events tell, not an inspect."""
        if self._channel is not None:  # the env's last words come by the attach stream, a moment later
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stream.ended.wait(), STDERR_WAIT_S)
        try:
            why = await self.engine.call(stop_reason, self.engine.api, self.container_id, self._created_at)
        except docker.errors.APIError:
            return
        if why == "oom":
            self._stream.note(
                f"the container was killed for using more than its memory limit of "
                f"{self.spec.resources.memory_mb} MB ([resources] memory_mb in env.toml)"
            )
        elif why is not None:
            self._stream.note(f"the container exited with code {why}")


class _ChannelUnseen(Exception):
    """The engine refused the channel's folder as a bind source: it cannot see this server's files."""


def with_channel(config: dict, channel: Channel | None) -> dict:
    """create_container's arguments with `channel`'s folder mounted and its socket named."""
    if channel is None:
        return config
    mount, environment = channel.container_settings()
    host_config = {**config["host_config"], "Mounts": [*config["host_config"].get("Mounts", []), mount]}
    return {**config, "host_config": host_config, "environment": {**config["environment"], **environment}}


def stop_reason(api: docker.APIClient, container_id: str, since: float) -> str | None:
    """Why the container stopped, from the engine's events: "oom" when the kernel killed it for memory, else
    its exit code; None when it has not stopped within DIE_EVENT_WAIT_S (blocking)."""
    events = api.events(
        since=since,
        until=time.time() + DIE_EVENT_WAIT_S,
        decode=True,
        filters={"container": container_id, "event": ["oom", "die"]},
    )
    try:
        oom = False
        for event in events:
            if event.get("Action") == "oom":
                oom = True
            elif event.get("Action") == "die":
                return "oom" if oom else event.get("Actor", {}).get("Attributes", {}).get("exitCode", "?")
        return None
    finally:
        events.close()
