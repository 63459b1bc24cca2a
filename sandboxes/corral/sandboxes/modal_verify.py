"""Command verifiers on Modal: a fresh sandbox of the env's image, what the agent left, none of
its processes. The same steps as docker's (docker_verify), through Modal's exec:

1. Every process the agent started in its sandbox is killed (`kill -9 -1`, which spares the
   sandbox's PID 1 and the caller), once.
2. A fresh sandbox of the same image starts, with the same limits and no network; its command
   is an idle `sleep` that ends it once the verifier's time is up.
3. The verifier's files are unpacked by `tar` into VERIFIER_DIR and a random suffix, new for
   each verification (0444 files): a name no link the agent made can know.
4. The env's writable folders are streamed from the agent's sandbox into the fresh one by
   `tar`, at most twice their size in bytes; more fails the verifier.
5. A link among them that leads into the verifier's files or /proc (an answer linked to
   /proc/self/fd/3 reads as the file the verifier opened first) fails the verifier, resolved
   step by step in the fresh sandbox (shell_links).
6. The command runs in the image's working directory; Modal reports its exit code. The fresh
   sandbox is terminated, whatever happened.

Not verified against Modal's cloud (no credentials here): which user Modal's exec runs as,
and so whether the env's user could change the verifier's files, is Modal's choice.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Mapping, Sequence

import modal

from corral.errors import SandboxError
from corral.sandboxes.archives import tar_of
from corral.sandboxes.base import CommandResult, SandboxSpec
from corral.sandboxes.links import stopped_by
from corral.sandboxes.shell_links import Shell, forged_links_under

VERIFIER_DIR = "/verifier"  # and a random suffix, new for each verification
TAR, SH, SLEEP = "/bin/tar", "/bin/sh", "/bin/sleep"
SETUP_TIMEOUT_S = 300.0  # creating a sandbox in the cloud, copying in: the platform's part
IDLE_GRACE_S = 30.0
KILL_EVERYONE = "kill -9 -1; kill -9 -1; exit 0"


async def verify_in_fresh_sandbox(
    agent: modal.Sandbox,
    spec: SandboxSpec,
    create: dict,
    files: Mapping[str, bytes],
    command: Callable[[str], Sequence[str]],
    *,
    timeout_s: float,
    keep: int,
    stop_agent: bool,
) -> CommandResult:
    """The module docstring's steps for the episode played in `agent`, a sandbox of `spec`
    made with Sandbox.create's keyword arguments `create` (its app, image and limits)."""
    lifetime = math.ceil(SETUP_TIMEOUT_S + timeout_s + IDLE_GRACE_S)
    files_dir = f"{VERIFIER_DIR}-{uuid.uuid4().hex}"
    fresh: modal.Sandbox | None = None
    try:
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            if stop_agent:
                await _run(agent, [SH, "-c", KILL_EVERYONE], what="stopping the agent's processes")
            options = {**create, "block_network": True, "timeout": lifetime}
            fresh = await modal.Sandbox.create.aio(SLEEP, str(lifetime), **options)
            await fresh.set_tags.aio({**await agent.get_tags.aio(), "corral.purpose": "verify"})
            await _put_files(fresh, files, files_dir)
            failed = await _copy_writable(agent, fresh, spec.writable, spec.scratch_mb)
            if failed is None and (forged := await forged_links_under(_shell(fresh), spec.writable, [files_dir])):
                failed = stopped_by(forged)
        if failed is not None:
            return CommandResult(exit_code=1, output=failed)
        return await _command(fresh, list(command(files_dir)), timeout_s=timeout_s, keep=keep)
    except TimeoutError:
        raise SandboxError(
            f"setting up the verification of env {spec.env_name} on Modal took more than {SETUP_TIMEOUT_S:g}s"
        ) from None
    except modal.exception.Error as error:
        raise SandboxError(f"verifying env {spec.env_name} on Modal failed: {error}") from None
    finally:
        if fresh is not None:
            await fresh.terminate.aio()


async def _run(sandbox: modal.Sandbox, argv: list[str], *, what: str, stdin: bytes | None = None) -> None:
    process = await sandbox.exec.aio(*argv, text=False)
    if stdin is not None:
        process.stdin.write(stdin)
        process.stdin.write_eof()
        await process.stdin.drain.aio()
    code = await process.wait.aio()
    if code != 0:
        raise SandboxError(f"{what} failed (exit code {code}): {(await process.stderr.read.aio())[-1000:]!r}")


async def _put_files(sandbox: modal.Sandbox, files: Mapping[str, bytes], folder: str) -> None:
    archive = tar_of(files, file_mode=0o444)
    unpack = f"mkdir -p {folder} && {TAR} -x -f - -C {folder} --no-same-owner"
    await _run(sandbox, [SH, "-c", unpack], what="unpacking the verifier's files", stdin=archive)


def _shell(sandbox: modal.Sandbox) -> Shell:
    """`/bin/sh -c` with the arguments given, in `sandbox`: its stdout, and its stderr's tail."""

    async def run(arguments: list[str]) -> tuple[bytes, str]:
        process = await sandbox.exec.aio(SH, "-c", *arguments, text=False)
        output, errors = await asyncio.gather(process.stdout.read.aio(), process.stderr.read.aio())
        await process.wait.aio()
        return bytes(output), bytes(errors)[-1000:].decode(errors="replace")

    return run


async def _copy_writable(
    source: modal.Sandbox, target: modal.Sandbox, writable: Sequence[str], scratch_mb: int
) -> str | None:
    """Stream the writable folders from `source` into `target`; None when done, else why not."""
    if not writable:
        return None
    most = 2 * scratch_mb * 2**20 * len(writable)
    pack = await source.exec.aio(TAR, "-c", "-f", "-", "-C", "/", *(path.lstrip("/") for path in writable), text=False)
    unpack = await target.exec.aio(TAR, "-x", "-p", "-f", "-", "-C", "/", text=False)
    sent = 0
    async for chunk in pack.stdout:
        sent += len(chunk)
        if sent > most:
            return (
                f"[corral] the env's writable folders ({', '.join(writable)}) came to more than "
                f"{most >> 20} MB as an archive, twice their size limit; nothing was verified"
            )
        unpack.stdin.write(chunk)
        await unpack.stdin.drain.aio()
    unpack.stdin.write_eof()
    await unpack.stdin.drain.aio()
    packed, unpacked = await pack.wait.aio(), await unpack.wait.aio()
    if packed == 0 and unpacked == 0:
        return None
    return f"[corral] the agent's files could not be copied for verifying (tar exited with {packed} and {unpacked})"


async def _command(sandbox: modal.Sandbox, argv: list[str], *, timeout_s: float, keep: int) -> CommandResult:
    """Run the verifier's command: its exit code (None past `timeout_s`) and the end of its
    output, stdout then stderr (Modal keeps them apart)."""
    process = await sandbox.exec.aio(*argv, text=False, timeout=math.ceil(timeout_s))
    output = bytearray()

    async def collect(stream) -> None:
        async for chunk in stream:
            output.extend(chunk)
            del output[: -keep * 4]  # characters are at most 4 bytes

    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(collect(process.stdout), collect(process.stderr))
            code: int | None = await process.wait.aio()
    except TimeoutError:
        code = None
    return CommandResult(code, output.decode("utf-8", errors="replace")[-keep:])
