"""The server's own folders in a shared place ($TMPDIR): made by the server, or refused.

In a folder every user may write (/tmp), another user can make a server's folder first: to
read or replace what the server keeps there (an env's socket, an episode's files), or only to
stop it from starting. So a server's folder is one it made itself, or one it already owned
and only it could write; anything else is refused, saying what was wrong and what to do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.errors import ConfigError


def safe_name(name: str) -> str:
    """`name` with every character a file name should not hold as `-` (an instance name, to name folders by)."""
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)


def private_folder(path: Path, mode: int, fix: str = "serve with another --instance") -> None:
    """Make `path` a folder of this user's with `mode` (blocking); ConfigError, naming `fix`
    beside removing it, when it exists and is a link, not a folder, another user's, or
    writable by others."""
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        pass
    info = path.lstat()
    wrong = _what_is_wrong(info)
    if wrong:
        raise ConfigError(
            f"{path} {wrong}, so another user may have made it to read or replace what corral keeps "
            f"there; remove it (and find out who made it), or {fix}"
        )
    os.chmod(path, mode)  # lchmod is not needed: it is no link


def _what_is_wrong(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to this server's uid {os.geteuid()}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return ""
