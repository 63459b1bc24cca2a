"""Resolving a link the agent left, step by step as the kernel would, without following it.

A verifier reads the agent's files as data, and a symbolic link resolves at read time: an
answer linked to the verifier's expected one (`../files/expected.txt`, `/verifier/...`) or to
`/proc/self/fd/3` (the file the verifier opened first) reads as the expected answer. `walk`
resolves one link's target a step at a time, asking its caller what each step is (a link, and
its target, or not), and stops at a step into a forbidden folder or into /proc, whose paths
depend on who reads them. docker.whole_image.links asks a container; `forged_links_here` asks this machine.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Generator, Sequence

from corral.sandboxes.shared import trees

MAX_HOPS = 40  # the kernel's own limit on links followed in one resolution
DYNAMIC = "/proc"

# Yields each path to lstat, is sent its link target (None: no link); returns the path it
# resolves to (bytes) or why it must not be followed (str).
Walk = Generator[bytes, bytes | None, bytes | str]


def walk(folder: bytes, path: bytes, forbidden: Sequence[bytes]) -> Walk:
    """Resolve `path` from `folder` as the kernel would: where it leads, or why it must not be
    followed (it enters `forbidden` or /proc, loops, or cannot be read)."""
    if not path:  # no link has an empty target: readlink failed
        return "its target could not be read"
    pending = path.split(b"/")
    here = b"/" if path.startswith(b"/") else folder
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in (b"", b"."):
            continue
        if part == b"..":
            here = posixpath.dirname(here)
            continue
        step = posixpath.join(here, part)
        for root in (*forbidden, DYNAMIC.encode()):
            if step == root or step.startswith(root.rstrip(b"/") + b"/"):
                return f"it leads into {root.decode(errors='replace')}, which the verifier brings in or which differs by reader"
        if not _is_utf8(step):  # the engine's API takes UTF-8 only: such a path cannot be asked about
            return "it leads through a name that is not UTF-8, which corral cannot check"
        target = yield step
        if target == b"":  # no link has an empty target: readlink failed
            return "its target could not be read"
        if target is None:
            here = step
            continue
        hops += 1
        if hops > MAX_HOPS:
            return "it does not resolve (a loop of links)"
        pending = target.split(b"/") + pending
        here = b"/" if target.startswith(b"/") else here
    return here


def _is_utf8(path: bytes) -> bool:
    try:
        path.decode()
    except UnicodeDecodeError:
        return False
    return True


def forged_links_here(folder: str, forbidden: Sequence[str]) -> list[str]:
    """One line for each link under `folder` (on this machine) whose resolution enters
    `forbidden` or /proc (blocking)."""
    roots = [os.fsencode(os.path.realpath(path)) for path in forbidden]
    found = []
    for root, folders, files in trees.walk(folder):  # not os.walk: it recurses, and folders may nest 1,500 deep
        for name in [*folders, *files]:
            path = os.fsencode(os.path.join(root, name))
            if not os.path.islink(path):  # False too for a path past PATH_MAX, which no reader opens
                continue
            try:
                target = os.readlink(path)
                why = _resolve_here(walk(os.path.dirname(path), target, roots))
            except OSError as error:
                target, why = b"?", f"it could not be read ({error.strerror})"
            if isinstance(why, str):
                found.append(f"{os.fsdecode(path)} -> {os.fsdecode(target)}: {why}")
    return found


def _resolve_here(steps: Walk) -> bytes | str:
    try:
        step = next(steps)
        while True:
            step = steps.send(os.readlink(step) if os.path.islink(step) else None)
    except StopIteration as done:
        return done.value


def stopped_by(found: Sequence[str]) -> str:
    """Why a verifier did not run, for `found` (a forged_links answer): the agent's doing, it fails."""
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        "[corral] the verifier did not run: links the agent left lead where the verifier's own files are, "
        f"or where the agent's user cannot read: {shown}"
    )
