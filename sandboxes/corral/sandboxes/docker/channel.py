"""The data path between the server and a container's env: a Unix socket, not the engine.

Why: over the attach stream every protocol line goes through dockerd and the container's
shim, both ways, which made a tool call 1.9x slower than in-process and halved the calls a
server answers per second. Here the server listens on a Unix socket in a folder of its own
for each container, that folder alone is bind-mounted read-only into the container at
CHANNEL_MOUNT, and the env's runtime connects to it (`CORRAL_CHANNEL`, corral.env.runtime):
the kernel carries the lines between the two processes, nothing else. The network stays off.
The attach stream remains for start-up (the SDK goes in over stdin) and for stderr.

- One connection per socket: the first is accepted, then the socket's name is unlinked, so
  nothing can connect after the env did. Before that, only a process that can list the
  folder's parent could find it: the parent is 0711 and the folder's name is random.
- Paths: the engine resolves a bind mount's source on its own host. A server on the host uses
  `$TMPDIR` (or `CORRAL_CHANNEL_DIR`), in a folder of its own it made or checked (runtime_dirs:
  one another user made first is refused at start); a server in a container needs a host folder mounted at
  the same path in its container, named by `CORRAL_CHANNEL_DIR` (compose.yaml does this).
  When the engine lacks the folder (a bind source it cannot find), the provider falls back to
  the attach stream for every container, and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import tempfile
from pathlib import Path

from corral.errors import ConfigError
from corral.sandboxes.runtime_dirs import private_folder
from corral.sandboxes.shared.trees import remove_tree

log = logging.getLogger("corral.sandboxes.docker")

DIRECTORY_VARIABLE = "CORRAL_CHANNEL_DIR"
CHANNEL_VARIABLE = "CORRAL_CHANNEL"  # read by corral.env.runtime in the container
CHANNEL_MOUNT = "/run/corral"
SOCKET_NAME = "env.sock"
MODEL_SOCKET_NAME = "model.sock"  # a harness env's: the server listens there for the agent's model calls
LINE_LIMIT = 64 * 1024 * 1024  # one protocol line may carry a large tool result
MISSING_SOURCE = "bind source path does not exist"  # the engine's refusal of a folder it cannot see


class Channels:
    """The folder that holds one server instance's channels: `<dir>/corral-channels-<instance>/`."""

    def __init__(self, instance: str, directory: str | None = None):
        base = Path(directory or os.environ.get(DIRECTORY_VARIABLE) or tempfile.gettempdir())
        self.root = base / f"corral-channels-{instance}"
        self.usable = True  # until the engine shows it cannot see this folder
        self._claimed = False

    def reap(self) -> int:
        """Claim this instance's folder (ConfigError when it is another user's: see
        runtime_dirs) and remove every channel folder a killed server of it left (blocking)."""
        try:
            self._claim()
        except OSError:  # a folder it may not write: open() falls back to the attach stream, saying why
            return 0
        left = list(self.root.iterdir())
        for folder in left:
            remove_tree(folder)
        return len(left)

    def open(self) -> Channel | None:
        """A new channel, listening (blocking, but only a mkdir and a bind); None, and the
        attach stream from now on, when this server cannot make one here."""
        folder = self.root / secrets.token_hex(16)
        try:
            self._claim()
        except (ConfigError, OSError) as error:  # never a folder someone else could read or replace sockets in
            self._give_up(str(error))
            return None
        try:
            folder.mkdir(mode=0o755)
            return Channel(folder)
        except OSError as error:  # a folder it may not write, a path too long for a socket (108 bytes)
            remove_tree(folder)
            self._give_up(
                f"this server cannot make a socket in {self.root} ({error}); set {DIRECTORY_VARIABLE} "
                "to a short folder it may write"
            )
            return None

    def _claim(self) -> None:
        if not self._claimed:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            private_folder(self.root, 0o711, fix=f"set {DIRECTORY_VARIABLE} to a folder of this user's")
            self._claimed = True

    def unreachable(self, detail: str) -> None:
        """The engine cannot see this server's folders: every container from now on talks over
        its attach stream."""
        self._give_up(
            f"the Docker engine cannot see {self.root} ({detail}). A server in a container needs a host "
            f"folder mounted at the same path, named by {DIRECTORY_VARIABLE} (compose.yaml mounts one)"
        )

    def _give_up(self, why: str) -> None:
        if self.usable:
            self.usable = False
            log.warning("env containers talk over their attach streams, through the engine (slower): %s", why)

    def close(self) -> None:
        remove_tree(self.root)


class Channel:
    """One container's socket: the server listens, the env connects once."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._path = folder / SOCKET_NAME
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self._path))
        os.chmod(self._path, 0o666)  # the env's uid (1000) connects; the folder's name is the secret
        self._listener.listen(1)
        self._listener.setblocking(False)
        self._accepted: asyncio.Task[tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None = None
        self._writer: asyncio.StreamWriter | None = None

    def model_socket(self) -> tuple[Path, str]:
        """A harness agent's way to the model (Sandbox.model_socket): beside the env's socket."""
        return self.folder / MODEL_SOCKET_NAME, f"{CHANNEL_MOUNT}/{MODEL_SOCKET_NAME}"

    def container_settings(self) -> tuple[dict, dict[str, str]]:
        """The read-only mount of this folder and the variable that names the socket, for
        create_container."""
        mount = {"Type": "bind", "Source": str(self.folder), "Target": CHANNEL_MOUNT, "ReadOnly": True}
        return mount, {CHANNEL_VARIABLE: f"{CHANNEL_MOUNT}/{SOCKET_NAME}"}

    def listen(self) -> None:
        """Start accepting (on the loop) as the container starts."""
        self._accepted = asyncio.ensure_future(self._accept())

    async def connected(self, gone: asyncio.Event) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The env's connection, once it has connected; EOFError when the container's stream
        ends (`gone`: the env died while starting) first."""
        assert self._accepted is not None, "listen() first"
        if not self._accepted.done():
            ended = asyncio.ensure_future(gone.wait())
            try:
                await asyncio.wait({self._accepted, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
            if not self._accepted.done():
                raise EOFError("the env exited before it connected to the server")
        return self._accepted.result()

    async def _accept(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        connection, _ = await asyncio.get_running_loop().sock_accept(self._listener)
        self._stop_listening()
        reader, writer = await asyncio.open_unix_connection(sock=connection, limit=LINE_LIMIT)
        self._writer = writer
        return reader, writer

    def _stop_listening(self) -> None:
        self._listener.close()
        with contextlib.suppress(OSError):
            self._path.unlink()

    async def close(self) -> None:
        """End the connection (the env reads end-of-file) and remove the folder."""
        if self._accepted is not None and not self._accepted.done():
            self._accepted.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await self._accepted
        self._stop_listening()
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self._writer.wait_closed()
        remove_tree(self.folder)


async def write_line(writer: asyncio.StreamWriter, line: bytes) -> None:
    """One protocol line to the env; EOFError once its end is closed."""
    if writer.is_closing():
        raise EOFError("the env's socket is closed")
    try:
        writer.write(line + b"\n")
        await writer.drain()
    except (BrokenPipeError, ConnectionResetError) as error:
        raise EOFError("the env's socket is closed") from error


async def read_line(reader: asyncio.StreamReader) -> bytes:
    """One protocol line from the env without its newline; EOFError at its end (or past LINE_LIMIT)."""
    try:
        line = await reader.readline()
    except ValueError:  # asyncio's LimitOverrunError, as readline raises it
        raise EOFError(f"the env wrote more than {LINE_LIMIT >> 20} MB without a newline") from None
    except (ConnectionResetError, BrokenPipeError):
        raise EOFError("the env's socket was reset") from None
    if not line.endswith(b"\n"):
        raise EOFError("the env closed its socket")
    return line[:-1]
