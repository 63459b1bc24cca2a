"""A container's attach (or exec) stream on asyncio: stdin out, stdout and stderr in.

docker-py is synchronous; it does the HTTP upgrade (`attach_socket`, `exec_start(socket=True)`)
and hands back the hijacked socket, which this module drives with asyncio, so thousands of
open streams cost no threads. Without a TTY Docker multiplexes stdout and stderr on the one
connection: each frame is an 8-byte header (stream type, three zero bytes, a big-endian
length) and its payload. stdout frames feed a bounded line buffer; stderr frames go to a bounded tail.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
from typing import Any

from corral.errors import ConfigError

STDOUT, STDERR = 1, 2
LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result
STDERR_KEEP = 64 * 1024
SOCKET_BUFFER = 1024 * 1024  # frames are read whole, whatever their size; this bounds the read-ahead


def raw_socket(hijacked: Any) -> socket.socket:
    """An independent socket for the connection docker-py hijacked, so its wrappers can go.

    docker-py returns a `SocketIO` (unix socket, plain TCP) whose `_sock` is the connection;
    the fd is duplicated so closing docker-py's response objects cannot close our stream.
    """
    inner = getattr(hijacked, "_sock", hijacked)
    if not isinstance(inner, socket.socket) or type(inner).__name__ == "SSLSocket":
        raise ConfigError(
            "the docker sandbox talks to the engine over a unix socket or plain TCP; "
            f"this engine connection is a {type(inner).__name__} (TLS is not supported): "
            "point DOCKER_HOST at the engine's unix socket"
        )
    duplicate = socket.socket(fileno=os.dup(inner.fileno()))
    duplicate.setblocking(False)
    with contextlib.suppress(OSError):
        hijacked.close()
    return duplicate


class MuxStream:
    """One hijacked, multiplexed Docker stream: write stdin, read stdout lines, keep stderr."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, merged: bool = False):
        self._merged = merged  # stderr read as stdout too, in the order it came (a command's output)
        self._raw_reader = reader
        self._writer = writer
        # stdout waiting to be read; the pump stops reading the socket while it holds a full
        # line's limit, so an env flooding stdout cannot grow the server's memory
        self._stdout = bytearray()
        self._stdout_added = asyncio.Event()
        self._stdout_room = asyncio.Event()
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self.ended = asyncio.Event()  # set once the engine closed the stream
        self._pump = asyncio.create_task(self._demultiplex())

    @classmethod
    async def open(cls, hijacked: Any, *, merged: bool = False) -> MuxStream:
        reader, writer = await asyncio.open_connection(sock=raw_socket(hijacked), limit=SOCKET_BUFFER)
        return cls(reader, writer, merged=merged)

    async def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            raise EOFError("the container's stdin is closed")
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise EOFError("the container's stdin is closed") from error

    async def read_line(self) -> bytes:
        """One stdout line without its newline; EOFError once the stream has ended (or the
        env wrote a line longer than LINE_LIMIT, which no reader could take)."""
        scanned = 0  # a long line arrives in many frames: look at each byte once
        while (end := self._stdout.find(b"\n", scanned)) < 0:
            scanned = len(self._stdout)
            if len(self._stdout) >= LINE_LIMIT:
                raise EOFError(f"the env wrote more than {LINE_LIMIT >> 20} MB on stdout without a newline")
            if self.ended.is_set():
                raise EOFError("the container's stdout closed")
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

    def note(self, text: str) -> None:
        """Add corral's own line to the stderr tail (e.g. why the container stopped)."""
        self._keep_stderr(f"\n[corral] {text}\n".encode())

    def stderr_tail(self, max_chars: int) -> str:
        return b"".join(self._stderr).decode("utf-8", errors="replace")[-max_chars:]

    async def close_stdin(self) -> None:
        """Send end-of-file to the process's stdin; its stdout keeps coming."""
        with contextlib.suppress(OSError):
            self._writer.write_eof()
            await self._writer.drain()

    async def close(self) -> None:
        """End the connection itself, not just this copy of its socket: docker-py still holds the
        socket it hijacked, and the process on the far end must see its stdin close (an env
        exits then, and a container created with AutoRemove goes)."""
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        connection = self._writer.get_extra_info("socket")
        if connection is not None:  # through a copy of its fd: uvloop's transport sockets have no shutdown()
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(connection.fileno())) as copy:
                copy.shutdown(socket.SHUT_RDWR)
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()

    async def _wait_for_stdout(self) -> None:
        self._stdout_added.clear()
        await self._stdout_added.wait()

    async def _demultiplex(self) -> None:
        try:
            while True:
                header = await self._raw_reader.readexactly(8)
                kind, size = header[0], struct.unpack(">I", header[4:])[0]
                payload = await self._raw_reader.readexactly(size)
                if kind == STDERR:
                    self._keep_stderr(payload)
                    if not self._merged:
                        continue
                self._stdout += payload
                self._stdout_added.set()
                while len(self._stdout) >= LINE_LIMIT:
                    self._stdout_room.clear()
                    await self._stdout_room.wait()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.ended.set()
            self._stdout_added.set()

    def _keep_stderr(self, payload: bytes) -> None:
        self._stderr.append(payload)
        self._stderr_size += len(payload)
        while self._stderr_size - len(self._stderr[0]) >= STDERR_KEEP:
            self._stderr_size -= len(self._stderr.popleft())
