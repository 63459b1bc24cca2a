"""What a sandbox's env wrote, held until the protocol reads it: stdout lines, a stderr tail.

A task of the sandbox reads the env's output stream (a Docker attach socket, a Kubernetes
attach WebSocket, Modal's stdout iterator) and feeds it here; the protocol reads whole lines.
The stdout buffer is bounded: while it holds a full line's limit the feeding task waits, so
an env flooding stdout stops being read instead of growing the server's memory. stderr keeps
only its last STDERR_KEEP bytes, for the error that says why an env died.
"""

from __future__ import annotations

import asyncio
import collections

LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result
STDERR_KEEP = 64 * 1024


class OutputBuffers:
    """One env's stdout waiting to be read and the tail of its stderr."""

    def __init__(self) -> None:
        self._stdout = bytearray()
        self._stdout_added = asyncio.Event()
        self._stdout_room = asyncio.Event()
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self.ended = asyncio.Event()  # the stream ended: no more stdout will come

    async def add_stdout(self, data: bytes) -> None:
        """Append to stdout; returns once the buffer holds less than a line's limit again."""
        self._stdout += data
        self._stdout_added.set()
        while len(self._stdout) >= LINE_LIMIT:
            self._stdout_room.clear()
            await self._stdout_room.wait()

    def add_stderr(self, data: bytes) -> None:
        """Keep `data` in the stderr tail, dropping the oldest chunks past STDERR_KEEP."""
        self._stderr.append(data)
        self._stderr_size += len(data)
        while self._stderr_size - len(self._stderr[0]) >= STDERR_KEEP:
            self._stderr_size -= len(self._stderr.popleft())

    def note(self, text: str) -> None:
        """Add corral's own line to the stderr tail (why the stream ended, say)."""
        self.add_stderr(f"\n[corral] {text}\n".encode())

    def end(self) -> None:
        """The stream ended: readers waiting for a line get EOFError once stdout is drained."""
        self.ended.set()
        self._stdout_added.set()

    async def read_line(self, ended_message: str) -> bytes:
        """One stdout line without its newline; EOFError(`ended_message`) once the stream has
        ended, or when the env wrote LINE_LIMIT bytes without a newline, which no reader could take."""
        scanned = 0  # a long line arrives in many chunks: look at each byte once
        while (end := self._stdout.find(b"\n", scanned)) < 0:
            scanned = len(self._stdout)
            if len(self._stdout) >= LINE_LIMIT:
                raise EOFError(f"the env wrote more than {LINE_LIMIT >> 20} MB on stdout without a newline")
            if self.ended.is_set():
                raise EOFError(ended_message)
            await self._wait_for_stdout()
        line = bytes(self._stdout[:end])
        del self._stdout[: end + 1]
        self._stdout_room.set()
        return line

    async def read(self) -> bytes:
        """Whatever stdout holds now (waiting for some); b"" once the stream has ended."""
        while not self._stdout and not self.ended.is_set():
            await self._wait_for_stdout()
        chunk = bytes(self._stdout)
        self._stdout.clear()
        self._stdout_room.set()
        return chunk

    def stderr_tail(self, max_chars: int = 4000) -> str:
        return b"".join(self._stderr).decode("utf-8", errors="replace")[-max_chars:]

    async def _wait_for_stdout(self) -> None:
        self._stdout_added.clear()
        await self._stdout_added.wait()
