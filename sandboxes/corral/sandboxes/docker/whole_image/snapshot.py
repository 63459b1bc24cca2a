"""Verifying an image run whole (a Harbor task's): its tests in a fresh container made from a
commit of what the agent left.

A Harbor task's agent may write anywhere in its container, so a copy of a few folders
(docker.verify) would not hold what it did. `DockerSandbox.verify`, for a spec with a
`writable_root`, does this instead:

1. The agent's container is paused, and stays paused until it is removed: every process the
   agent started stops where it is, and none of them ever runs again.
2. Its writable layer is measured once, paused (docker.whole_image.disk.written: a sparse file counts
   at its length, as a commit writes it out); past the task's disk bound the agent's doing
   fails the tests and nothing is committed. Else the container is committed: an image of the
   task's image and everything the agent changed (labelled `corral.purpose=verify`, removed
   afterwards).
3. A fresh container of that image is created, hardened as the agent's was, its first process
   docker's own init (from the engine, not the image) and the command that init's only child:
   when the command ends, everything else in the container ends with it.
4. The files (the task's tests) go into an empty volume at `files_dir` (Harbor's /tests), and
   the folder of each result file (/logs/verifier) is another empty volume, as is the command's
   HOME (VERIFIER_HOME): writable by root only when the command runs as root (which may then
   run the agent's programs as another user: it alone keeps SETUID and SETGID), else by all.
   Each is a tmpfs of bounded size, held by a keeper container of the task's image as built
   (docker.whole_image.keeper: the tests run the agent's programs, which would otherwise fill this
   machine's disk there). The volumes are made without the image's content there (`nocopy`),
   so nothing the agent left at those paths is seen, and the engine writes the files (its
   archive API, through the keeper): no program of the image, which the agent may have
   changed, takes part.
5. Its PATH and PYTHONPATH lose every folder the agent could write in, the image's start-up
   variables (LD_PRELOAD, BASH_ENV, ...) and those naming such a folder are set empty, and
   where the agent changed a folder its Python imports from by itself, it does not run
   (docker.whole_image.search_path).
   Before the command starts (it waits at a gate: a line on its stdin), every link the agent
   made is resolved, and one that leads into those folders or through /proc fails the tests
   (docker.whole_image.links): an answer linked to /tests/data/expected.json would read as the answer.
6. The command runs to its end or its deadline (then the container is killed), or until it has
   written more than the agent could to the container's root (docker.whole_image.disk: it runs the agent's
   programs), with a pristine environment (pristine.py: no user site, no cwd on Python's path,
   no bytecode cache); its output comes over the attach stream (the container keeps no log),
   its exit code from the engine, and the result files are read by the engine out of their
   volume (through the keeper) once it has ended.
7. The containers, their volumes and the committed image are removed, whatever happened: on the
   engine's threads, after the commit has finished, even one still under way past its
   deadline (a container of 200,000 files the agent made slow to commit).

What this cannot do: the command runs the image as the agent left it, so a task whose agent
runs as root could have changed the programs its tests run (bash, python3). Only a task whose
agent runs as another user (`[agent] user`) keeps those out of the agent's reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import docker.errors
import docker.types

from corral.errors import SandboxError
from corral.sandboxes.base import CommandResult, SandboxSpec
from corral.sandboxes.docker.engine import Engine, remove_container
from corral.sandboxes.docker.stream import MuxStream
from corral.sandboxes.docker.whole_image.disk import past_limit, watch_disk, written
from corral.sandboxes.docker.whole_image.fresh import VERIFIER_HOME, fresh_config, runs_as_root
from corral.sandboxes.docker.whole_image.keeper import remove_keeper, sizes_mb, start_keeper
from corral.sandboxes.docker.whole_image.links import forged_links
from corral.sandboxes.docker.whole_image.search_path import SearchPath, for_the_tests
from corral.sandboxes.shared.archives import tar_of
from corral.sandboxes.shared.links import stopped_by

STOPPING_S = 5.0  # how long a container that refused a pause may take to show as stopped
SETUP_TIMEOUT_S = 120.0  # pausing, committing, creating, copying in: the platform's part
RESULT_MAX_BYTES = 1024 * 1024  # a result file larger than this is not read back
FILES_MODE = 0o555  # the files are read-only; executable, so a test.sh may run its helpers
KILLED = 137
IDLE_GRACE_S = 30.0  # how long the keeper outlives the tests' deadline, at most
COMMIT_WAIT_S = 600.0  # how long the removal waits for a commit still under way, at most


async def verify_snapshot(
    engine: Engine,
    spec: SandboxSpec,
    config: Mapping,
    source: str,
    files: Mapping[str, bytes],
    command: Callable[[str], Sequence[str]],
    *,
    timeout_s: float,
    keep: int,
    files_dir: str = "/verifier",
    results: Sequence[str] = (),
    user: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> CommandResult:
    """The module docstring's steps, for `source` (the agent's container, made with `config`)."""
    snapshot = f"corral-verify/{_safe(spec.env_name)}:{uuid.uuid4().hex[:12]}"
    name = f"{config['name']}-verify-{uuid.uuid4().hex[:6]}"
    made: list[str] = []  # the fresh container's id, once the engine has made it
    kept: list[str] = []  # the keeper's
    committed = threading.Event()  # set once the commit has ended, in time or not
    commit_started = False
    try:
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            refused, changed = await _paused_in_bounds(engine, spec, source)
            if refused is not None:
                return CommandResult(exit_code=1, output=refused)
            commit_started = True
            await _commit(engine, source, snapshot, committed)
            user = config["user"] if user is None else user
            as_root = await runs_as_root(engine, snapshot, user)
            keeper = await start_keeper(
                engine,
                config,
                name,
                sizes_mb(spec, files, files_dir, folders_of(results)),
                by_root_only=as_root,
                lifetime_s=SETUP_TIMEOUT_S + timeout_s + IDLE_GRACE_S,
                made=kept,
            )
            searched = await for_the_tests(engine, snapshot, keeper.container, config, environment or {}, changed or [])
            if searched.planted:
                return CommandResult(exit_code=1, output=_planted(searched.planted))
            fresh = fresh_config(
                config,
                snapshot,
                name,
                mounts=keeper.mounts(),
                user=user,
                as_root=as_root,
                environment={**(environment or {}), **searched.environment},
                command=list(command(files_dir)),
            )
            made.append((await engine.call(engine.api.create_container, **fresh))["Id"])
            stream, refused = await _started_at_gate(engine, made[0], keeper.container, files, files_dir)
            if refused is None:
                refused = await _links_checked(
                    engine, made[0], fresh["user"], changed, [files_dir, *folders_of(results)], searched.agent
                )
        if refused is not None:
            await stream.close()
            return CommandResult(exit_code=1, output=refused)
        # The gate opens. Its stdin stays open: closing it would end the attach, output and all.
        await stream.write(b"go\n")
        code, output = await _watched_run(engine, spec, made[0], stream, timeout_s=timeout_s, keep=keep)
        found = {
            path: content
            for path in results
            if (content := await _read_back(engine, keeper.container, path)) is not None
        }
        return CommandResult(code, output + _notes(searched), found)  # last: the output's head may be cut
    except TimeoutError:
        raise SandboxError(
            f"setting up the verification of env {spec.env_name} took more than {SETUP_TIMEOUT_S:g}s; "
            "is the Docker engine overloaded?"
        ) from None
    except docker.errors.APIError as error:
        raise SandboxError(f"verifying env {spec.env_name}: {error.explanation or error}") from None
    finally:
        if not commit_started:
            committed.set()
        engine.in_background(
            f"the verification of env {spec.env_name}",
            _remove,
            engine,
            made[0] if made else name,
            snapshot,
            committed,
            kept,
        )


def folders_of(results: Sequence[str]) -> list[str]:
    """The folders the verifier brings in beside its files: HOME and each result file's."""
    return [VERIFIER_HOME, *dict.fromkeys(posixpath.dirname(path) for path in results)]


async def _paused_in_bounds(engine: Engine, spec: SandboxSpec, source: str) -> tuple[str | None, list[dict]]:
    """Pause the agent's container and measure what it wrote: why the tests cannot run (it is
    gone, or past the task's disk bound), else None; and the paths it changed."""
    if (gone := await _pause(engine, source)) is not None:
        return gone, []
    # What the agent made, by the engine's word, measured before the commit, which would
    # write all of it out: a sparse file of terabytes too.
    size_rw, changed = await written(engine, source) or (0, [])
    limit_mb = spec.resources.disk_mb
    if limit_mb is not None and (over := past_limit(size_rw, len(changed), limit_mb)) is not None:
        return f"[corral] the tests did not run, nothing was committed: {over}", changed
    return None, changed


async def _commit(engine: Engine, source: str, snapshot: str, committed: threading.Event) -> None:
    """Commit the (paused) agent's container as the image `snapshot`; `committed` is set once the
    commit has ended, even one still under way on the engine's thread past this call's deadline."""

    def commit() -> None:
        try:
            engine.api.commit(
                source,
                repository=snapshot.split(":")[0],
                tag=snapshot.split(":")[1],
                pause=False,
                changes=["LABEL corral.purpose=verify", f"LABEL corral.instance={engine.instance}"],
            )
        finally:
            committed.set()

    await engine.call(commit)


async def _started_at_gate(
    engine: Engine, container: str, keeper: str, files: Mapping[str, bytes], files_dir: str
) -> tuple[MuxStream, str | None]:
    """The fresh container with the files in, attached and started: its command waits at the
    gate. Its stream, and why it cannot run, if it cannot."""
    # Into the keeper's volume: its paths are the task's image's, not the agent's.
    await engine.call(engine.api.put_archive, keeper, files_dir, tar_of(files, file_mode=FILES_MODE))
    stream = await MuxStream.open(
        await engine.call(engine.api.attach_socket, container, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}),
        merged=True,
    )
    return stream, await _start(engine, container, files_dir)


def _planted(planted: Sequence[str]) -> str:
    """Why the tests did not run when the agent changed folders their Python imports from."""
    more = f" and {len(planted) - 5} more" if len(planted) > 5 else ""
    return (
        "[corral] the tests did not run: the agent's user changed folders their Python imports from: "
        + ", ".join(planted[:5])
        + more
    )


def _notes(searched: SearchPath) -> str:
    """What the tests' output says of the folders and variables taken from them."""
    notes = ""
    if searched.left_off:
        notes += (
            f"\n[corral] left off the tests' PATH and PYTHONPATH, as the agent's user could write there: "
            f"{', '.join(searched.left_off)}"
        )
    if searched.emptied:
        notes += (
            "\n[corral] set empty for the tests, as the image's value runs code as a program starts or "
            f"names a path the agent's user could write: {', '.join(searched.emptied)}"
        )
    return notes


async def _links_checked(
    engine: Engine, container: str, user: str, changed: list[dict] | None, brought_in: list[str], agent: str
) -> str | None:
    """None when no link the agent made leads into what the verifier brought in, or where the
    agent's user cannot read (docker.whole_image.links), else why the tests do not run: that is the
    agent's doing, and its tests fail."""
    try:
        found = await forged_links(engine, container, user, changed or [], brought_in, agent)
    except SandboxError as error:  # the container stopped: the gate's /bin/sh did not run
        return f"[corral] the tests could not start in a copy of what the agent left: its /bin/sh failed ({error})"
    if not found:
        return None
    with contextlib.suppress(docker.errors.APIError):
        await engine.call(engine.api.kill, container)
    return stopped_by(found)


async def _pause(engine: Engine, container: str) -> str | None:
    """Pause the agent's container for good; None when paused, else why it cannot be: it has
    stopped, which is the agent's doing (it ended the container's first process), so there is
    nothing to verify and the tests fail, rather than the episode going unscored."""
    try:
        await engine.call(engine.api.pause, container)
    except docker.errors.APIError as error:
        detail = str(error.explanation or error)
        if "is already paused" in detail:  # a second verifier of the episode
            return None
        # The engine words a stopped container several ways, so its state decides, not the message.
        if isinstance(error, docker.errors.NotFound) or await _stopped(engine, container):
            return f"[corral] the task's container had stopped before its tests could run (its first process ended): {detail}"
        raise
    return None


async def _stopped(engine: Engine, container: str, settle_s: float = STOPPING_S) -> bool:
    """Whether the container has stopped, or stops within `settle_s`: a container whose first
    process just died refuses a pause before the engine records it as stopped."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            state = (await engine.call(engine.api.inspect_container, container))["State"]
        except docker.errors.NotFound:
            return True
        if not state.get("Running"):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


async def _start(engine: Engine, container: str, files_dir: str) -> str | None:
    """Start the verifier's container; None when started, else why not. Its settings are
    corral's and start every other episode's, so what fails here is the copy of what the agent
    left: a file where a folder is mounted, a /bin/sh it deleted. Its doing: the tests fail."""
    try:
        await engine.call(engine.api.start, container)
    except docker.errors.APIError as error:
        return (
            f"[corral] the tests could not start in a copy of what the agent left (at {files_dir}, or its "
            f"/bin/sh): {error.explanation or error}"
        )
    return None


async def _watched_run(
    engine: Engine, spec: SandboxSpec, container: str, stream: MuxStream, *, timeout_s: float, keep: int
) -> tuple[int | None, str]:
    """`_run`, with what the tests write to the container's root bounded as the agent's was
    (docker.whole_image.disk): they run the agent's programs, which may fill it. Past the bound the tests
    are killed and fail, saying why: that is the agent's doing."""
    if spec.resources.disk_mb is None:
        return await _run(engine, container, stream, timeout_s=timeout_s, keep=keep)
    stopped: list[str] = []
    watch = asyncio.ensure_future(watch_disk(engine, container, spec.resources.disk_mb, stopped.append))
    try:
        code, output = await _run(engine, container, stream, timeout_s=timeout_s, keep=keep)
    finally:
        watch.cancel()
    return code, "".join(f"[corral] the tests' copy of the agent's container: {why}\n" for why in stopped) + output


async def _run(
    engine: Engine, container: str, stream: MuxStream, *, timeout_s: float, keep: int
) -> tuple[int | None, str]:
    """Read the command's output until it ends or `timeout_s` passes (then the container is
    killed: exit code None); its exit code as the engine recorded it, and its output's tail."""
    output = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await stream.read():
                output += chunk
                del output[: -keep * 4]  # characters are at most 4 bytes
            code = (await engine.call(engine.api.wait, container, timeout=SETUP_TIMEOUT_S))["StatusCode"]
    except TimeoutError:
        with contextlib.suppress(docker.errors.APIError):
            await engine.call(engine.api.kill, container)
        code = None
    finally:
        await stream.close()
    return code, output.decode("utf-8", errors="replace")[-keep:]


async def _read_back(engine: Engine, container: str, path: str) -> bytes | None:
    """The file at `path` in the stopped container, read by the engine (its archive API); None
    when the command did not write it, or wrote something else there (a folder, a link)."""
    try:
        chunks, stat = await engine.call(engine.api.get_archive, container, path)
    except docker.errors.NotFound:
        return None
    if stat.get("size", 0) > RESULT_MAX_BYTES or stat.get("mode", 0) & 0o20000000000 or stat.get("linkTarget"):
        return None  # a folder (Go's ModeDir bit), a link, or a file too large to be a result

    def read() -> bytes | None:
        data = b"".join(chunks)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.next()
            if member is None or not member.isfile():
                return None
            extracted = archive.extractfile(member)
            return extracted.read() if extracted is not None else None

    return await asyncio.to_thread(read)


def _remove(engine: Engine, container: str, image: str, committed: threading.Event, kept: list[str]) -> None:
    """Remove the verifier's container, then the keeper with the volumes (the container names
    them, so they outlive its removal), then, once the commit has ended, the committed image
    (blocking)."""
    remove_container(engine.api, container)  # gone, so that the keeper's volumes are free
    if kept:
        remove_keeper(engine, kept[0])
    committed.wait(COMMIT_WAIT_S)
    with contextlib.suppress(docker.errors.NotFound):
        engine.api.remove_image(image, force=True, noprune=False)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name.lower())
