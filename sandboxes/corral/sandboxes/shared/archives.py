"""Files handed to a sandbox as one tar stream (docker's put_archive, an exec's stdin, Modal's
process stdin): owned by root, with the modes the caller gives."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping


def tar_of(entries: Mapping[str, bytes | None], *, file_mode: int, dir_mode: int = 0o755) -> bytes:
    """A tar of `entries` (relative path -> content; None: a folder)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for relative, content in entries.items():
            info = tarfile.TarInfo(relative)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, dir_mode
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), file_mode
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
