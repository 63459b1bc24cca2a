"""The local provider: one child process per episode, on this machine.

This is the embedded default for laptops and CI. It is NOT an isolation boundary: the env
runs as the server's user, with its network and files. Each process gets its own process
group, so closing the sandbox kills the env and everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from corral.errors import SandboxError
from corral.sandboxes.base import (
    CommandResult,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)

# The folder that holds the `corral` namespace with the env SDK (corral/env and the
# corral/errors.py it raises from), put on the env's import path so `python3 -m corral.env`
# works without installing anything.
_SDK_ROOT = Path(__file__).resolve().parents[2]
LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result


class LocalSandbox(Sandbox):
    def __init__(
        self,
        process: asyncio.subprocess.Process,
        workdir: Path,
        stderr_path: Path,
        environ: dict[str, str],
        running: set[LocalSandbox],
    ):
        self._process = process
        self._workdir = workdir
        self._environ = environ
        self._stderr_path = stderr_path
        self._running = running  # the provider's set, so shutdown finds every live process
        self._closed = False
        running.add(self)

    async def send_line(self, line: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(line + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise EOFError("the env process closed its stdin") from error

    async def read_line(self) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            line = await stdout.readline()
        except ValueError:  # asyncio's LimitOverrunError, as readline raises it
            raise EOFError(f"the env wrote more than {LINE_LIMIT >> 20} MB on stdout without a newline") from None
        if not line:
            raise EOFError("the env process closed its stdout")
        return line.rstrip(b"\n")

    def stderr_tail(self, max_chars: int = 4000) -> str:
        try:
            with self._stderr_path.open("rb") as stderr:
                stderr.seek(0, os.SEEK_END)
                stderr.seek(max(0, stderr.tell() - max_chars))
                return stderr.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    async def put_files(self, files: Mapping[str, bytes]) -> str:
        # Read-only by mode only: locally the env runs as the server's user and could undo it.
        folder = Path(tempfile.mkdtemp(prefix="files-", dir=self._workdir))
        for relative, content in files.items():
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(0o444)
        return str(folder)

    async def run(self, command: Sequence[str], *, timeout_s: float, max_output_chars: int = 20_000) -> CommandResult:
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self._workdir,
                env=self._environ,
                start_new_session=True,
            )
        except OSError as error:
            return CommandResult(exit_code=127, output=f"could not run {command[0]!r}: {error}")
        try:
            async with asyncio.timeout(timeout_s):
                output, _ = await process.communicate()
            exit_code: int | None = process.returncode
        except TimeoutError:
            output, exit_code = b"", None
        finally:
            # Also on cancellation (the session went away): nothing the command started stays.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if exit_code is None:
            output, _ = await process.communicate()
        return CommandResult(exit_code, output.decode("utf-8", errors="replace")[-max_output_chars:])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._running.discard(self)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        await self._process.wait()
        shutil.rmtree(self._workdir, ignore_errors=True)


class LocalProvider(SandboxProvider):
    """Runs each episode's env as a child process in a fresh scratch folder."""

    kind = "local"
    isolated = False

    def __init__(self) -> None:
        self._running: set[LocalSandbox] = set()

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        # `labels` are dropped: a child process has nowhere to carry them.
        workdir = Path(tempfile.mkdtemp(prefix=f"corral-{spec.env_name}-"))
        stderr_path = workdir / ".stderr"
        environ = dict(os.environ)
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(spec.context_dir), str(_SDK_ROOT), environ.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        environ["PYTHONUNBUFFERED"] = "1"
        try:
            with stderr_path.open("wb") as stderr:
                process = await asyncio.create_subprocess_exec(
                    *spec.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    cwd=workdir,
                    env=environ,
                    start_new_session=True,
                    limit=LINE_LIMIT,
                )
        except OSError as error:
            shutil.rmtree(workdir, ignore_errors=True)
            raise SandboxError(f"could not start {spec.command[0]!r} for env {spec.env_name}: {error}")
        return LocalSandbox(process, workdir, stderr_path, environ, self._running)

    def status(self) -> ProviderStatus:
        return ProviderStatus(self.kind, self.isolated, live=len(self._running))

    async def aclose(self) -> None:
        await asyncio.gather(*(sandbox.close() for sandbox in list(self._running)))

