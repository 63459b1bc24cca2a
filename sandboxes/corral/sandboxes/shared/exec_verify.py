"""Command verifiers in a fresh sandbox, for a provider that can only start sandboxes and run
commands in them (Modal, Kubernetes): what the agent left, none of its processes.

The steps are docker's (docker.verify), each a command run through the provider (`Execs`):

1. Every process the agent started in its sandbox is killed (`kill -9 -1`, which spares the
   sandbox's PID 1, the env, and the caller), once.
2. A fresh sandbox of the same image starts, with the same limits and no network; its command
   is an idle `sleep` that ends it once the verifier's time is up.
3. The verifier's files are unpacked by `tar` into VERIFIER_DIR and a random suffix, new for
   each verification (0444 files): a name no link the agent made can know.
4. The env's writable folders are packed by `tar` in the agent's sandbox, at most twice their
   size in bytes (more fails the verifier), spooled here, and unpacked by `tar` in the fresh one.
5. A link among them that leads into the verifier's files or /proc (an answer linked to
   /proc/self/fd/3 reads as the file the verifier opened first) fails the verifier, resolved
   step by step in the fresh sandbox (shared.shell_links).
6. The command runs in the image's working directory, its output kept to its end and its exit
   code reported by the provider; past its deadline its exit code is None. The fresh sandbox is
   removed, whatever happened, and everything the command started goes with it.

Every binary run here comes from the image by absolute path.
"""

from __future__ import annotations

import abc
import asyncio
import io
import math
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Generic, TypeVar

from corral.errors import SandboxError
from corral.sandboxes.base import CommandResult, SandboxSpec
from corral.sandboxes.shared.archives import tar_of
from corral.sandboxes.shared.links import stopped_by
from corral.sandboxes.shared.shell_links import Shell, forged_links_under

VERIFIER_DIR = "/verifier"  # and a random suffix, new for each verification
TAR, SH, SLEEP = "/bin/tar", "/bin/sh", "/bin/sleep"
SETUP_TIMEOUT_S = 300.0  # creating a sandbox in a cloud or a cluster, copying in: the platform's part
IDLE_GRACE_S = 30.0
KILL_EVERYONE = "kill -9 -1; kill -9 -1; exit 0"  # twice: a process forking as the first went by
STDOUT, STDERR = 1, 2
SPOOL_IN_MEMORY = 4 * 2**20  # a larger archive of the agent's folders waits on this machine's disk

S = TypeVar("S")  # a provider's handle on one sandbox
Output = Callable[[int, bytes], None]  # told each chunk of a command's output, STDOUT or STDERR, as it comes


@dataclass(frozen=True)
class Stdin:
    """What a command reads on its stdin: `size` bytes from `file`, then end-of-file."""

    file: IO[bytes]
    size: int


class Execs(abc.ABC, Generic[S]):
    """What a provider does for a verification: start the fresh sandbox, run commands, remove it."""

    where: str  # "on Modal", for messages
    errors: tuple[type[BaseException], ...]  # the provider's own failures, reported as SandboxError

    @abc.abstractmethod
    async def start(self, files_dir: str, lifetime_s: int) -> S:
        """Start a fresh sandbox of the agent's spec whose command is `sleep lifetime_s`, with no
        network, in which the command's user can create `files_dir`; ready for `run` on return.
        One that fails or is cancelled half-started is removed before this raises."""

    @abc.abstractmethod
    async def run(self, sandbox: S, argv: Sequence[str], output: Output, stdin: Stdin | None = None) -> int:
        """Run `argv` in `sandbox` as the env's user, feeding it `stdin` (none: no stdin), telling
        `output` each chunk as it comes (an error `output` raises ends the call); its exit code."""

    @abc.abstractmethod
    async def remove(self, sandbox: S) -> None:
        """Remove a sandbox `start` returned, with everything running in it."""


class _TooLarge(Exception):
    """The agent's folders came to more than their bound as an archive."""


async def verify_in_fresh_sandbox(
    execs: Execs[S],
    agent: S,
    spec: SandboxSpec,
    files: Mapping[str, bytes],
    command: Callable[[str], Sequence[str]],
    *,
    timeout_s: float,
    keep: int,
    stop_agent: bool,
) -> CommandResult:
    """The module docstring's steps for the episode played in `agent`, a sandbox of `spec`."""
    lifetime = math.ceil(SETUP_TIMEOUT_S + timeout_s + IDLE_GRACE_S)
    files_dir = f"{VERIFIER_DIR}-{uuid.uuid4().hex}"
    fresh: S | None = None
    try:
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            if stop_agent:
                await _check(execs, agent, [SH, "-c", KILL_EVERYONE], "stopping the agent's processes")
            fresh = await execs.start(files_dir, lifetime)
            archive = tar_of(files, file_mode=0o444)
            unpack = f"mkdir -p {files_dir} && {TAR} -x -f - -C {files_dir} --no-same-owner"
            stdin = Stdin(io.BytesIO(archive), len(archive))
            await _check(execs, fresh, [SH, "-c", unpack], "unpacking the verifier's files", stdin)
            failed = await _copy_writable(execs, agent, fresh, spec.writable, spec.scratch_mb)
            if failed is None and (
                forged := await forged_links_under(_shell(execs, fresh), spec.writable, [files_dir])
            ):
                failed = stopped_by(forged)
        if failed is not None:
            return CommandResult(exit_code=1, output=failed)
        return await _command(execs, fresh, list(command(files_dir)), timeout_s=timeout_s, keep=keep)
    except TimeoutError:
        raise SandboxError(
            f"setting up the verification of env {spec.env_name} {execs.where} took more than {SETUP_TIMEOUT_S:g}s"
        ) from None
    except execs.errors as error:
        raise SandboxError(f"verifying env {spec.env_name} {execs.where} failed: {error}") from None
    finally:
        if fresh is not None:
            await asyncio.shield(execs.remove(fresh))  # even when the caller is cancelled


async def _check(execs: Execs[S], sandbox: S, argv: list[str], what: str, stdin: Stdin | None = None) -> None:
    """Run `argv`; SandboxError with its stderr's tail unless it exits 0."""
    errors = bytearray()
    code = await execs.run(sandbox, argv, _tail(errors, 1000, STDERR), stdin)
    if code != 0:
        raise SandboxError(f"{what} failed (exit code {code}): {bytes(errors)!r}")


def _tail(kept: bytearray, most: int, *channels: int) -> Output:
    """An Output that keeps the last `most` bytes of `channels` in `kept`."""

    def add(channel: int, chunk: bytes) -> None:
        if channel in channels:
            kept.extend(chunk)
            del kept[:-most]

    return add


def _shell(execs: Execs[S], sandbox: S) -> Shell:
    """`/bin/sh -c` with the arguments given, in `sandbox`: its stdout, and its stderr's tail."""

    async def run(arguments: list[str]) -> tuple[bytes, str]:
        output, errors = bytearray(), bytearray()

        def add(channel: int, chunk: bytes) -> None:
            (output if channel == STDOUT else errors).extend(chunk)
            del errors[:-1000]

        await execs.run(sandbox, [SH, "-c", *arguments], add)
        return bytes(output), errors.decode(errors="replace")

    return run


async def _copy_writable(execs: Execs[S], source: S, target: S, writable: Sequence[str], scratch_mb: int) -> str | None:
    """Copy the writable folders from `source` into `target`; None when done, else why not."""
    if not writable:
        return None
    most = 2 * scratch_mb * 2**20 * len(writable)
    errors = bytearray()
    with tempfile.SpooledTemporaryFile(SPOOL_IN_MEMORY) as spool:

        def add(channel: int, chunk: bytes) -> None:
            if channel == STDOUT:
                if spool.tell() + len(chunk) > most:
                    raise _TooLarge
                spool.write(chunk)
            else:
                _tail(errors, 1000, STDERR)(channel, chunk)

        pack = [TAR, "-c", "-f", "-", "-C", "/", *(path.lstrip("/") for path in writable)]
        try:
            packed = await execs.run(source, pack, add)
        except _TooLarge:
            return (
                f"[corral] the env's writable folders ({', '.join(writable)}) came to more than "
                f"{most >> 20} MB as an archive, twice their size limit; nothing was verified"
            )
        size = spool.tell()
        spool.seek(0)
        # Folders that exist (a mount) keep their owner and mode: the env's user may not change them.
        unpack = [TAR, "-x", "-p", "--no-overwrite-dir", "-f", "-", "-C", "/"]
        unpacked = await execs.run(target, unpack, _tail(errors, 1000, STDERR), Stdin(spool, size))  # type: ignore[arg-type]
    if packed == 0 and unpacked == 0:
        return None
    return (
        f"[corral] the agent's files could not be copied for verifying (tar exited with {packed} and "
        f"{unpacked}): {errors.decode(errors='replace')}"
    )


async def _command(execs: Execs[S], sandbox: S, argv: list[str], *, timeout_s: float, keep: int) -> CommandResult:
    """Run the verifier's command: its exit code (None past `timeout_s`) and the end of its
    output, stdout and stderr as they came."""
    output = bytearray()
    code: int | None
    try:
        async with asyncio.timeout(timeout_s):
            code = await execs.run(
                sandbox, argv, _tail(output, keep * 4, STDOUT, STDERR)
            )  # characters are at most 4 bytes
    except TimeoutError:
        code = None
    return CommandResult(code, output.decode("utf-8", errors="replace")[-keep:])
