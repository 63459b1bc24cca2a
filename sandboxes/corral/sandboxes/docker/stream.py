"""A container's attach (or exec) stream on asyncio: stdin out, stdout and stderr in.

docker-py is synchronous; it does the HTTP upgrade (`attach_socket`, `exec_start(socket=True)`)
and hands back the hijacked socket, which this module drives with asyncio, so thousands of
open streams cost no threads. Without a TTY Docker multiplexes stdout and stderr on the one
connection: each frame is an 8-byte header (stream type, three zero bytes, a big-endian
length) and its payload. stdout frames feed a bounded line buffer; stderr frames go to a bounded
tail (stream_buffers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from typing import Any

from corral.errors import ConfigError
from corral.sandboxes.shared.stream_buffers import OutputBuffers

STDOUT, STDERR = 1, 2
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
        self._output = OutputBuffers()  # the pump stops reading the socket while stdout holds a line's limit
        self.ended = self._output.ended  # set once the engine closed the stream
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
        """One stdout line without its newline; EOFError once the stream has ended."""
        return await self._output.read_line("the container's stdout closed")

    async def read(self) -> bytes:
        """Whatever stdout holds now (waiting for some); b"" once the stream has ended."""
        return await self._output.read()

    def note(self, text: str) -> None:
        """Add corral's own line to the stderr tail (e.g. why the container stopped)."""
        self._output.note(text)

    def stderr_tail(self, max_chars: int) -> str:
        return self._output.stderr_tail(max_chars)

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

    async def _demultiplex(self) -> None:
        try:
            while True:
                header = await self._raw_reader.readexactly(8)
                kind, size = header[0], struct.unpack(">I", header[4:])[0]
                payload = await self._raw_reader.readexactly(size)
                if kind == STDERR:
                    self._output.add_stderr(payload)
                    if not self._merged:
                        continue
                await self._output.add_stdout(payload)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._output.end()
