"""What the benches share: a frame exchanged over a raw socket, and a server started in a
process of its own and waited for. (A bench runs as a script, so its folder is on the path.)"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from corral.protocol.frames import SERVER_FRAMES, ErrorReply, ObservationData

SERVER_START_S = 600  # a docker server builds its envs' images first, when missing


async def exchange(socket_, frame: BaseModel) -> ObservationData:
    """Send `frame`, and the reply's data; a refusal raises RuntimeError."""
    await socket_.send(frame.model_dump_json())
    reply = SERVER_FRAMES.validate_json(await socket_.recv())
    if isinstance(reply, ErrorReply):
        raise RuntimeError(f"{reply.data.code}: {reply.data.message}")  # noqa: TRY004 - a refusal, not a type
    return reply.data


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    command: list[str], port: int, what: str, log: Path | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """Start `command` (with `env`, else this process's), a server listening on `port` (its
    output to `log`, else to a temporary file named if it fails); (its process, its URL) once
    /health answers."""
    log = log or Path(tempfile.mkstemp(prefix="corral-bench-server-", suffix=".log")[1])
    server = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:  # it gave up (a broken bundle, a taken port): say so now
            raise SystemExit(
                f"{what} exited with status {server.returncode} before it answered; "
                f"its output is in {log}:\n{log.read_text()[-2000:]}"
            )
        try:
            if httpx.get(f"{url}/health", trust_env=False, timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"{what} did not answer within {SERVER_START_S}s at {url}")
