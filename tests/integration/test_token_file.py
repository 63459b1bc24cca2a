"""A server's token is on no command line: `--token-file` reads it, and `--token` given on the
command line, which every process of the machine can read (/proc/PID/cmdline), is warned about."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import BUNDLES
from tests.servers import corral_command, free_port, stop

TOKEN = "s3cret-from-a-file"


def serve(*options: str) -> tuple[subprocess.Popen, str]:
    """`corral serve gridsim OPTIONS`, once it answers (401 without the token counts)."""
    port = free_port()
    command, environ = corral_command(
        "serve", str(BUNDLES / "gridsim"), "--sandbox", "local", "--port", str(port), *options
    )
    environ.pop("CORRAL_TOKEN", None)
    server = subprocess.Popen(
        command, env=environ, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code in (200, 401):
                return server, url
        time.sleep(0.1)
    stop(server)
    raise AssertionError(f"corral serve did not answer: {server.stderr.read().decode()[-2000:]}")


def test_a_token_file_guards_the_server_and_stays_off_its_command_line(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server, url = serve("--token-file", str(token_file))
    try:
        seen_by_others = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        statuses = [
            httpx.get(url + "/metadata", headers=headers, trust_env=False).status_code
            for headers in ({}, {"Authorization": f"Bearer {TOKEN}"})
        ]
    finally:
        stop(server)

    assert TOKEN.encode() not in seen_by_others
    assert statuses == [401, 200]
    assert b"can be read by every process" not in server.stderr.read()


def test_a_token_on_the_command_line_is_accepted_with_a_warning():
    server, url = serve("--token", TOKEN)
    try:
        status = httpx.get(url + "/metadata", headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False).status_code
    finally:
        stop(server)

    assert status == 200
    assert (
        "WARNING corral.server: --token on the command line can be read by every process on this machine "
        "(/proc/PID/cmdline), an env's included where it is not isolated; pass it with --token-file FILE or "
        "CORRAL_TOKEN instead"
    ) in server.stderr.read().decode()
