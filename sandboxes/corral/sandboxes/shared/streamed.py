"""A sandbox whose env speaks over a stream the provider reads (a Kubernetes pod's attach
WebSocket, a Modal sandbox's stdio) and whose verifiers run through the provider's exec.

What such a sandbox does is the same on every provider but for two things: how bytes reach the
env's stdin (`write`) and which tasks read its output (`readers`). The rest is here, once: the
protocol's lines through `OutputBuffers`, the stderr tail, whether it is alive, the command
verifiers in a fresh sandbox of the same image (shared.exec_verify), and a close that hands the
removal to the provider (`on_close`), so that a cancelled caller cannot stop it.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from corral.sandboxes.base import CommandResult, Sandbox, SandboxSpec
from corral.sandboxes.shared.exec_verify import Execs, verify_in_fresh_sandbox
from corral.sandboxes.shared.stream_buffers import OutputBuffers


class StreamedSandbox(Sandbox):
    """The env's output is fed into `self.output` by the tasks in `self.readers` (started by the
    subclass); `target` is what `execs` knows the agent's sandbox by (a pod's name, a Modal
    sandbox), and `ended_message` what a read past the stream's end says."""

    ended_message: str

    def __init__(self, spec: SandboxSpec, on_close: Callable[[Any], None]):
        self.spec = spec
        self.output = OutputBuffers()
        self.ended = self.output.ended  # the stream ended: the env exited (or its sandbox went)
        self.readers: list[asyncio.Task[None]] = []
        self._on_close = on_close
        self._closed = False
        self._agent_stopped = False

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Write to the env's stdin; EOFError once it can take no more."""

    @abc.abstractmethod
    def verifier_execs(self) -> tuple[Execs[Any], Any]:
        """The provider's exec, and what it knows this sandbox by: command verifiers use them."""

    @property
    def alive(self) -> bool:
        return not self._closed and not self.ended.is_set()

    async def send_line(self, line: bytes) -> None:
        await self.write(line + b"\n")

    async def read_line(self) -> bytes:
        return await self.output.read_line(self.ended_message)

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return self.output.stderr_tail(max_chars)

    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        """In a fresh sandbox of the same image, once the agent's processes are gone: see shared.exec_verify."""
        first = not self._agent_stopped
        self._agent_stopped = True
        execs, target = self.verifier_execs()
        return await verify_in_fresh_sandbox(
            execs, target, self.spec, files, command, timeout_s=timeout_s, keep=max_output_chars, stop_agent=first
        )

    async def close(self) -> None:
        """Stop reading, then hand the sandbox's removal to the provider; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for reader in self.readers:
            reader.cancel()
        await self.stop_stream()
        self._on_close(self)

    async def stop_stream(self) -> None:
        """End what carries the env's stdio on this side (by default, nothing to end)."""
