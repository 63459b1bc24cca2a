"""Walking and removing folders an agent filled, with no recursion.

Python 3.11's `os.walk` and `shutil.rmtree` recurse one frame per level: a tree 1,000
folders deep (a `mkdir -p` of a long path, seconds of the agent's turn) makes them raise
RecursionError, which escaped the verifier's copy and the episode's removal, failed the
end of the turn in corral and left the episode's folder on the machine. These never raise
for depth, and `remove_tree` leaves nothing a path can still name.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


def walk(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """What `os.walk(top)` yields (top-down: a caller may prune `dirs`), following no link,
    from a list of folders still to read instead of recursion. A folder that cannot be read
    (mode 000, a path longer than the system takes) is skipped, as `os.walk` skips it."""
    pending = [str(top)]
    while pending:
        root = pending.pop()
        try:
            with os.scandir(root) as entries:
                found = list(entries)
        except OSError:
            continue
        dirs: list[str] = []
        files: list[str] = []
        for entry in found:
            try:
                folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                folder = False
            (dirs if folder else files).append(entry.name)
        yield root, dirs, files
        pending.extend(os.path.join(root, name) for name in reversed(dirs))


def remove_tree(path: Path) -> None:
    """Remove a folder and all in it, read-only folders this user owns included (blocking):
    an env that made a folder 0555 cannot leave it behind. Links are never followed. `rm`
    and `chmod` walk by descriptors, so no depth or path length stops them."""
    if not os.path.lexists(path):
        return
    if os.geteuid() != 0:  # root removes whatever the modes say
        subprocess.run(
            ["chmod", "-R", "u+rwx", "--", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    subprocess.run(
        ["rm", "-rf", "--", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
