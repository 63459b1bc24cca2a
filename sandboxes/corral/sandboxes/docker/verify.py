"""Command verifiers in a fresh container: what the agent left, none of its processes.

`DockerSandbox.verify` runs a task's tests where nothing the agent started runs and nothing
it wrote can be executed by corral or run with privileges:

1. Every process of the env's user in the agent's container is killed (`kill -9 -1` as that
   user, once): PID 1, the env, is immune inside its own namespace, and without capabilities
   the user can signal no other uid.
2. Meanwhile a fresh container of the same image starts, with the same hardening; its PID 1
   is an idle `sleep` (not the env, not an interpreter) that ends the container (AutoRemove)
   once the verifier's time is up, so not even a killed server leaves it behind for long.
3. The verifier's files are unpacked by `tar`, as root with `/` as its working folder, into
   `/verifier`, a tmpfs of root's; the env's user can read them and change nothing there.
4. Meanwhile the env's writable folders are streamed from the agent's container into the
   fresh one by `tar` run as the env's user on both sides (they are tmpfs mounts, which
   neither `docker commit` nor the archive API sees), at most twice their size in bytes; more
   is the agent's doing (a sparse file of terabytes, say) and fails the verifier.
   Bytecode is left out of the copy (pristine.BYTECODE), and so is what that user cannot
   read (a folder the agent made mode 000), as the local sandbox does; the output says so.
5. The command runs as the env's user in the image's working directory, with a pristine
   environment (pristine.py: no user site, no cwd on Python's path, no bytecode cache, HOME a
   fresh tmpfs of its own, and every variable of the image's ENV that makes a program load or
   run code as it starts, BASH_ENV or LD_PRELOAD, set empty unless the task sets it itself:
   pristine.startup_emptied, as for a Harbor task's tests); the engine reports its exit code. The fresh container is removed,
   whatever happened.

Every binary run here comes from the image by absolute path, so a writable folder on the
image's PATH changes nothing, and no interpreter is started with an agent-writable folder as
its working folder or on its import path.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

import docker.errors

from corral.errors import ImageError, SandboxError
from corral.sandboxes.base import INODES_PER_MB, CommandResult, SandboxSpec
from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.execs import Exec
from corral.sandboxes.docker.whole_image.links import forged_links_under
from corral.sandboxes.shared.archives import tar_of
from corral.sandboxes.shared.links import stopped_by
from corral.sandboxes.shared.pristine import BYTECODE, pristine_environment, startup_emptied
from corral.sandboxes.shared.users import AGENT_USER, agent_apart, env_user, scratch_mounts, without_identities

VERIFIER_DIR = "/verifier"  # and a random suffix, new for each verification
VERIFIER_HOME = "/verifier-home"  # the command's HOME: a tmpfs the agent never saw
TAR, SH, SLEEP = "/bin/tar", "/bin/sh", "/bin/sleep"
SETUP_TIMEOUT_S = 120.0  # killing, starting, copying in: the platform's part, apart from the command's own deadline
IDLE_GRACE_S = 30.0  # how long the fresh container outlives the verifier's deadline, at most
FILES_MB_MIN = 16
KILL_EVERYONE = "kill -9 -1; kill -9 -1; exit 0"  # twice: a process forking as the first went by


async def startup_variables(engine: Engine, config: dict) -> dict[str, str]:
    """The start-up variables of the image of a container made with `config` that the task did
    not set (pristine.startup_emptied), empty: every process corral starts in the agent's
    container or its fresh copy runs with them, so none loads a file the agent wrote."""
    info = (await engine.call(engine.api.inspect_image, config["image"]))["Config"]
    return startup_emptied(dict(item.partition("=")[::2] for item in info.get("Env") or []), config["environment"])


async def stop_agent(engine: Engine, container: str, users: Sequence[str], environment: Mapping[str, str]) -> None:
    """Kill every process of each of `users` in `container` but PID 1 (the idle env), with
    `environment` (startup_variables) over the container's."""
    await asyncio.gather(*(_kill_everyone(engine, container, user, environment) for user in users))


async def _kill_everyone(engine: Engine, container: str, user: str, environment: Mapping[str, str]) -> None:
    kill = await Exec.start(
        engine, container, [SH, "-c", KILL_EVERYONE], user=user, workdir="/", environment=environment
    )
    code, output = await kill.output(timeout_s=SETUP_TIMEOUT_S, keep=1000)
    if code != 0:
        raise SandboxError(
            f"could not stop the processes of user {user} in container {container[:12]}: {output or kill.stderr_tail()}"
        )


async def verify_in_fresh_container(
    engine: Engine,
    spec: SandboxSpec,
    config: dict,
    source: str,
    files: Mapping[str, bytes],
    command: Callable[[str], Sequence[str]],
    *,
    timeout_s: float,
    keep: int,
    agent_stopped: Awaitable[None],
) -> CommandResult:
    """Steps 2-5 of the module docstring. `config` is create_container's arguments for the
    agent's container (its image, user, labels, hardening); `source` is that container, whose
    copy waits for `agent_stopped` (step 1, under way while the fresh container starts)."""
    files_dir = f"{VERIFIER_DIR}-{uuid.uuid4().hex}"  # a name no link the agent made can know
    emptied = await startup_variables(engine, config)
    fresh = fresh_container_config(
        config, spec, files, lifetime_s=SETUP_TIMEOUT_S + timeout_s + IDLE_GRACE_S, files_dir=files_dir, emptied=emptied
    )
    container: list[str] = []  # its id, once the engine has made it
    try:
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            await asyncio.gather(agent_stopped, start_fresh(engine, spec, fresh, container))
            # The root tar reads only its own archive and writes only in root's tmpfs, from the
            # image's /bin: the agent's files arriving beside it meanwhile cannot reach it.
            _, (failed, skipped) = await asyncio.gather(
                put_files(engine, container[0], files, files_dir),
                copy_writable(engine, spec, source, container[0], user=fresh["user"], environment=emptied),
            )
            if failed is None:
                failed = await _links_judged(engine, spec, container[0], fresh["user"], files_dir)
        if failed is not None:
            return CommandResult(exit_code=1, output=failed)
        run = await Exec.start(
            engine,
            container[0],
            list(command(files_dir)),
            user=fresh["user"],
            environment=fresh["environment"],
            merged=True,
        )
        code, output = await run.output(timeout_s=timeout_s, keep=keep)
        if skipped:
            output = f"[corral] some of the agent's files could not be copied, and are left out: {skipped}\n{output}"
        return CommandResult(code, output)
    except TimeoutError:
        raise SandboxError(
            f"setting up the verification of env {spec.env_name} took more than "
            f"{SETUP_TIMEOUT_S:g}s; is the Docker engine overloaded?"
        ) from None
    finally:
        engine.remove(container[0] if container else fresh["name"], fresh["name"])


async def start_fresh(engine: Engine, spec: SandboxSpec, config: dict, made: list[str]) -> None:
    """Create and start the verifier's container; its id goes into `made` at once, so that it
    is removed whatever happens next."""
    try:
        made.append((await engine.call(engine.api.create_container, **config))["Id"])
        await engine.call(engine.api.start, made[0])
    except docker.errors.ImageNotFound:
        raise ImageError(
            f"env {spec.env_name}: image {config['image']} is missing; build it with `corral build BUNDLE`"
        ) from None
    except docker.errors.APIError as error:
        raise SandboxError(
            f"could not start a container to verify env {spec.env_name} in: {error.explanation or error}"
        ) from None


def fresh_container_config(
    config: dict,
    spec: SandboxSpec,
    files: Mapping[str, bytes],
    *,
    lifetime_s: float,
    emptied: Mapping[str, str],
    files_dir: str = VERIFIER_DIR,
) -> dict:
    """The agent container's create arguments, changed for verifying: the env's user from the
    start with no capability, an idle PID 1 that ends the container after `lifetime_s`, no
    stdin, the writable folders its user's, a root-owned tmpfs at `files_dir`, and the image's
    start-up variables `emptied` (startup_variables, step 5)."""
    user = env_user(spec)
    host_config = {**config["host_config"], "CapAdd": None}
    size_mb = max(FILES_MB_MIN, 2 * math.ceil(sum(len(content) for content in files.values()) / 2**20))
    # No uid= option: the mount belongs to root, so the env's user can only read it. HOME is
    # the env user's own (its numeric uid:gid; a named user gets a HOME every user may write).
    uid, _, gid = user.partition(":")
    owner = f"mode=0700,uid={uid},gid={gid or uid}" if uid.isdigit() else "mode=1777"
    host_config["Tmpfs"] = {
        **scratch_mounts(spec, owner=user),
        files_dir: f"rw,nosuid,nodev,size={size_mb}m,mode=0755",
        VERIFIER_HOME: f"rw,nosuid,nodev,size={FILES_MB_MIN}m,nr_inodes={FILES_MB_MIN * INODES_PER_MB},{owner}",
    }
    host_config["AutoRemove"] = True
    labels = {**config["labels"], "corral.purpose": "verify"}
    labels.pop("corral.pool", None)
    return {
        **config,
        "user": user,
        "host_config": host_config,
        "labels": labels,
        "stdin_open": False,
        "detach": True,
        "environment": {
            **emptied,
            **pristine_environment(without_identities(config["environment"]), home=VERIFIER_HOME),
        },
        "entrypoint": [SLEEP, str(math.ceil(lifetime_s))],
        "command": [],
        "name": f"{config['name']}-verify-{uuid.uuid4().hex[:6]}",
    }


async def put_files(engine: Engine, container: str, files: Mapping[str, bytes], files_dir: str) -> None:
    """Unpack `files` into `files_dir` as root: files 0444, folders made by tar (root's, 0755)."""
    archive = tar_of(files, file_mode=0o444)
    unpack = await Exec.start(
        engine,
        container,
        [TAR, "-x", "-f", "-", "-C", files_dir, "--no-same-owner"],
        user="0:0",
        stdin=True,
        workdir="/",
    )
    await unpack.stream.write(archive)
    await unpack.stream.close_stdin()
    code, _ = await unpack.output(timeout_s=SETUP_TIMEOUT_S, keep=1000)
    if code != 0:
        raise SandboxError(f"could not unpack the verifier's files: {unpack.stderr_tail()}")


async def copy_writable(
    engine: Engine, spec: SandboxSpec, source: str, target: str, *, user: str, environment: Mapping[str, str]
) -> tuple[str | None, str]:
    """Stream the env's writable folders from `source` into `target` with `tar` as `user`
    (with `environment`, startup_variables, over the agent's container's):
    (None when done, else why not: the agent's doing, the verifier fails; what was left out
    because `user` cannot read it, as tar words it, or "")."""
    if not spec.writable:
        return None, ""
    most = 2 * spec.scratch_mb * 2**20 * len(spec.writable)
    folders = [path.lstrip("/") for path in spec.writable]
    # Anchored, each pattern once per member: unanchored, GNU tar tries it at every folder of a
    # path, which on folders nested 300 deep took 100 s of CPU per copy.
    excluded = ["--anchored", *(f"--exclude=*/{pattern}" for pattern in BYTECODE)]
    # --ignore-failed-read: what cannot be read is left out with a warning, not a failed copy.
    pack = await Exec.start(
        engine,
        source,
        [TAR, "-c", "-f", "-", "--ignore-failed-read", *excluded, "-C", "/", *folders],
        user=user,
        workdir="/",
        environment=environment,
    )
    unpack = await Exec.start(
        engine, target, [TAR, "-x", "-p", "-f", "-", "-C", "/"], user=user, stdin=True, workdir="/"
    )
    sent = 0
    try:
        while chunk := await pack.stream.read():
            sent += len(chunk)
            if sent > most:
                return (
                    f"[corral] the env's writable folders ({', '.join(spec.writable)}) came to more than "
                    f"{most >> 20} MB as an archive, twice their size limit; nothing was verified"
                ), ""
            await unpack.stream.write(chunk)
        await unpack.stream.close_stdin()
        packed, unpacked = await pack.exit_code(), (await unpack.output(timeout_s=SETUP_TIMEOUT_S, keep=1000))[0]
    except EOFError:  # the unpacking tar quit early: its stderr says why
        packed, unpacked = None, None
    finally:
        await pack.stream.close()
        await unpack.stream.close()
    if packed == 0 and unpacked == 0:
        return None, pack.stderr_tail()
    return (
        "[corral] the agent's files could not be copied for verifying (tar exited with "
        f"{packed} and {unpacked}): {pack.stderr_tail()} {unpack.stderr_tail()}".rstrip()
    ), ""


async def _links_judged(engine: Engine, spec: SandboxSpec, container: str, user: str, files_dir: str) -> str | None:
    """None when no link among the agent's copied files leads into the verifier's files, its
    HOME or /proc (docker.whole_image.links), else why the verifier does not run: an answer linked to an
    expected one (or to /proc/self/fd/3, the file the verifier opened first) would read as it;
    nor, where the agent has a user of its own, one whose end that user cannot read (an env's
    0600 file, which the verifier, as the env's user, would read for it)."""
    agent = AGENT_USER if agent_apart(spec) else None
    found = await forged_links_under(engine, container, user, list(spec.writable), [files_dir, VERIFIER_HOME], agent)
    return stopped_by(found) if found else None
