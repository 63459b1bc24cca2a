"""`corral serve` in a process of its own, for tests that kill it, restart it, or run it as
another user than the tests' (root's tests reach a non-root server that way)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

NOBODY = 65534
# What a user other than root can import corral from: the source roots and this virtualenv's
# packages, run by the system's python3 (this venv's interpreter may sit in root's home).
SOURCE_ROOTS = [REPO / root for root in ("protocol", "client", "server", "sandboxes", "training")]
SITE_PACKAGES = next((Path(sys.prefix) / "lib").glob("python3*/site-packages"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def instance_of(port: int) -> str:
    """The instance name a server on `port` takes when none is given."""
    return f"{socket.gethostname()}-{port}"


def python_command(*arguments: str, uid: int | None = None) -> tuple[list[str], dict[str, str]]:
    """`python ARGUMENTS`, with corral importable, as a command line and its environment: as
    `uid`, without root's groups, when given."""
    if uid is None:
        return [sys.executable, *arguments], dict(os.environ)
    return (
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3", *arguments],
        {
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(str(path) for path in [*SOURCE_ROOTS, SITE_PACKAGES]),
        },
    )


def corral_command(*arguments: str, uid: int | None = None) -> tuple[list[str], dict[str, str]]:
    """`corral ARGUMENTS` as a command line and its environment (as `uid` when given)."""
    return python_command("-c", "from corral.cli.main import app; app()", *arguments, uid=uid)


def corral_serve(bundle: Path, port: int, *options: str, uid: int | None = None) -> subprocess.Popen:
    """Start `corral serve bundle` on `port` (as `uid` when given); its stderr is kept on `.stderr`."""
    command, environ = corral_command("serve", str(bundle), "--port", str(port), *options, uid=uid)
    return subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ, cwd="/", start_new_session=True
    )


def wait_until_serving(server: subprocess.Popen, port: int, timeout_s: float = 120, token: str | None = None) -> str:
    """The server's URL once it answers /health (with `token`, when it wants one); fail with
    its stderr if it exits first."""
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"corral serve exited with {server.returncode}: {server.stderr.read().decode()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", headers=headers, timeout=1, trust_env=False).status_code == 200:
                return url
        time.sleep(0.1)
    pytest.fail(f"corral serve did not answer /health within {timeout_s:.0f}s")


def kill(server: subprocess.Popen) -> None:
    """SIGKILL the server alone (not what it started: the point is what it leaves behind)."""
    if server.poll() is None:
        server.send_signal(signal.SIGKILL)
    server.wait()


def stop(server: subprocess.Popen) -> None:
    """SIGTERM: the server removes what it started and exits (SIGKILL after a minute)."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            kill(server)


@contextlib.contextmanager
def serving(bundle: Path, *options: str, uid: int | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """A served `bundle` (URL, process), stopped with SIGTERM afterwards."""
    port = free_port()
    server = corral_serve(bundle, port, *options, uid=uid)
    try:
        yield wait_until_serving(server, port), server
    finally:
        stop(server)
