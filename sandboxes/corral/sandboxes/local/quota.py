"""Bounds on what a local episode may write to this machine's disk: sized tmpfs mounts.

An env's work folder is a folder of this machine, bound into its namespace; without a bound an
agent filled the host's disk through it (2 GB in one turn). Docker bounds its writable folders
with tmpfs mounts of `scratch_mb`; here the server mounts the same over the episode's folders
it writes to (`local`: its work folder and, without namespaces, its TMPDIR; `local.verify`:
each verification's folder), so the kernel refuses a write past the size (ENOSPC), during the
turn as during verification (files and folders are counted too: a million empty files would
hold the kernel's memory), and the memory goes when it is unmounted.

Only a server running as root with CAP_SYS_ADMIN (as CI runs, and as a root server's separate
uids already require) can mount. A server running as another user cannot: a tmpfs that
bubblewrap makes in a user namespace lives and dies with that namespace, and the work folder
must outlive the env's to be verified; so there the work folder stays on this machine's disk
without a bound during the turn, and only the verifier's size check (local.verify) fails an
episode that wrote more than its share, after the fact. `Quotas.why_not` says which applies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
import shutil
from pathlib import Path

from corral.sandboxes.base import INODES_PER_MB
from corral.sandboxes.local.procs import SETPRIV_PATH

log = logging.getLogger("corral.sandboxes")

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class Quotas:
    """Mounts sized tmpfs where this process may (root with CAP_SYS_ADMIN); else says why not, once."""

    def __init__(self, enabled: bool) -> None:
        self.why_not = (
            ""
            if enabled
            else (
                "the server is not root, so the local sandbox cannot mount a sized tmpfs "
                "over an episode's work folder: what the agent writes there during its "
                "turn is bounded only by this machine's disk"
            )
        )

    def bound(
        self, folder: Path, size_mb: int, *, uid: int | None = None, gid: int | None = None, mode: int = 0o700
    ) -> bool:
        """Mount a tmpfs of `size_mb` MB over the (empty) `folder`, owned by `uid` and `gid`
        (None: root; the gid by default the uid's number) with `mode`; False (and a warning,
        once) where this server cannot mount."""
        if self.why_not:
            return False
        owner = f",uid={uid},gid={uid if gid is None else gid}" if uid is not None else ""
        # Inodes too: empty files cost the kernel's memory, which `size` does not count.
        options = f"size={size_mb}m,nr_inodes={size_mb * INODES_PER_MB},mode={mode:o}{owner}".encode()
        if _libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0:
            return True
        failed = ctypes.get_errno()
        self.why_not = (
            f"the local sandbox could not mount a sized tmpfs over an episode's work folder "
            f"({os.strerror(failed)}; a container needs CAP_SYS_ADMIN): what the agent writes there "
            "during its turn is bounded only by this machine's disk"
        )
        log.warning("%s", self.why_not)
        return False


def process_limits(
    *, file_mb: int | None = None, processes: int | None = None, memory_mb: int | None = None
) -> list[str]:
    """A command prefix that bounds it and everything it starts, through util-linux's
    `prlimit` (no prefix where it is missing, or nothing to bound):

    - `file_mb`: no file written may pass that size (RLIMIT_FSIZE, as any user may set it).
      It bounds the env's stderr, which lives on this machine's disk whoever runs the server
      (a tool's error, which quotes the agent's arguments, added a megabyte a call); a write
      past it fails (EFBIG: Python ignores SIGXFSZ) or kills the writer.
    - `processes`: its real uid may hold no more processes (RLIMIT_NPROC, counted per uid by
      the kernel, root exempt): for a uid of the episode's own, the pids limit docker puts on
      a container. Without it an agent's fork bomb, or its code run by the tests, took this
      machine's pid space, and with it every other episode's next process.
    - `memory_mb`: no process may map more (RLIMIT_AS, as any user may set it): the env's
      `[resources] memory_mb`, which docker gives a container. An allocation past it fails
      (MemoryError, malloc's NULL) in the process that asked, never in the server or another
      episode: code the tests import that allocates past it fails the tests (scores 0), as a
      container's OOM kill does. It bounds each process, not their sum, which is at most
      `processes` times it (a cgroup would bound the sum; this host's cgroups are not the
      server's to divide)."""
    prlimit = shutil.which("prlimit", path=SETPRIV_PATH)
    bounds = [
        *([] if file_mb is None else [f"--fsize={file_mb << 20}"]),
        *([] if processes is None else [f"--nproc={processes}"]),
        *([] if memory_mb is None else [f"--as={memory_mb << 20}"]),
    ]
    return [prlimit, *bounds, "--"] if prlimit and bounds else []


def unbind(folder: Path) -> None:
    """Unmount what is mounted on `folder` and below it (blocking); nothing when none is."""
    if _libc.umount2(os.fsencode(folder), MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        raise OSError(ctypes.get_errno(), f"could not unmount {folder}: {os.strerror(ctypes.get_errno())}")


def unbind_all_under(root: Path) -> int:
    """Unmount every mount at or under `root` (what a killed server left), deepest first;
    how many there were (blocking)."""
    top = os.path.realpath(root)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mounts:
        for line in mounts:
            point = re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal[1], 8)), line.split()[4])  # " " is \040
            if point == top or point.startswith(top + "/"):
                found.append(point)
    for point in sorted(found, key=len, reverse=True):
        unbind(Path(point))
    return len(found)
