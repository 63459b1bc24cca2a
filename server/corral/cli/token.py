"""Where `corral serve` takes its bearer token from, keeping it off command lines.

Every process on a machine can read every command line (`/proc/PID/cmdline`), an env's
included where the local sandbox cannot isolate it. So the token comes from a file
(`--token-file`) or the environment (`CORRAL_TOKEN`); `--token` on the command line still
works, with a warning that says so.
"""

from __future__ import annotations

import logging
from pathlib import Path

from corral.errors import ConfigError

log = logging.getLogger("corral.server")


def serve_token(token: str | None, token_file: Path | None, *, on_command_line: bool) -> str | None:
    """The server's token: `token_file`'s first line, else `token` (from CORRAL_TOKEN, or from
    the command line when `on_command_line`, warned about). ConfigError saying what to do
    for a file that cannot be read or is empty, or a token given twice."""
    if token_file is None:
        if token is not None and on_command_line:
            log.warning(
                "--token on the command line can be read by every process on this machine "
                "(/proc/PID/cmdline), an env's included where it is not isolated; pass it with "
                "--token-file FILE or CORRAL_TOKEN instead"
            )
        return token
    if on_command_line:
        raise ConfigError("give the token one way: --token-file FILE, or CORRAL_TOKEN")
    try:
        first_line = token_file.read_text().split("\n", 1)[0].strip()
    except OSError as error:
        raise ConfigError(
            f"cannot read --token-file {token_file} ({error.strerror or error}); give a file this user may read"
        ) from None
    if not first_line:
        raise ConfigError(f"--token-file {token_file} is empty; write the token on its first line")
    return first_line
