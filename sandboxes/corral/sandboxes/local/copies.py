"""A fork's copy of a local episode's files (`LocalSandbox.copy_to`, fork = "copy").

The target is a fresh episode of the same spec: its own folder, uids and env process. Its work
folder is emptied (what its reset wrote goes: the copy replaces it whole) and then filled by
`cp -a` run as the source's agent, seeing only the source's work folder (read-only) and the
target's where bubblewrap runs, so the copy reads nothing that user could not; meanwhile the
target's folder is that user's, which no process of the source's can reach (its namespaces
show it its own folder alone). The copy is then given to the target's agent, links themselves
rather than what they lead to, so the target's agent owns what it copied and nothing of the
source's: their uids differ, and each folder is its own user's, as at a reset.

A file the source's agent cannot read (a folder it made mode 000) fails the copy: no copy is
handed out missing part of the state. Bounded as the verifier's copy is: a source larger than the target may hold (`share_mb`) is
refused before anything is copied, and the target's folder is a tmpfs of that size where the
server is root.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Protocol

from corral.errors import SandboxError
from corral.sandboxes.local.namespace import Contained
from corral.sandboxes.local.procs import Users, kill_group, minimal_environment
from corral.sandboxes.local.verify import SETUP_TIMEOUT_S, give, larger_than
from corral.sandboxes.shared.trees import remove_tree


class CopiedSandbox(Protocol):
    """What a copy needs of a local episode's sandbox (a LocalSandbox)."""

    folder: Path
    workdir: Path
    users: Users | None
    marker: str

    @property
    def share_mb(self) -> int: ...

    def workdir_owner(self) -> tuple[int | None, int | None, int]: ...

    async def spawn(
        self,
        command: list[str],
        *,
        uid: int | None,
        cwd: Path,
        environ: dict[str, str],
        read_only: list[Path] = ...,
        writable: list[Path] = ...,
        **popen,
    ) -> Contained: ...


async def copy_work(source: CopiedSandbox, target: CopiedSandbox) -> None:
    """The module docstring's steps; SandboxError when the copy cannot be made."""
    most = target.share_mb
    if await asyncio.to_thread(larger_than, source.workdir, most * 2**20):
        raise SandboxError(
            f"the episode's folder holds more than {most} MB (scratch_mb in env.toml bounds each "
            "writable folder), more than a copy may hold; nothing was copied"
        )
    reader = source.users.agent if source.users is not None else None
    owner, group, mode = target.workdir_owner()
    await asyncio.to_thread(_empty, target.workdir)
    if reader is not None:
        os.chown(target.workdir, reader, reader)
    environ = minimal_environment(target.workdir, Path("/tmp"), f"{source.marker}fork")
    started = await source.spawn(
        ["cp", "-a", f"{source.workdir}/.", str(target.workdir)],
        uid=reader,
        cwd=target.workdir,
        environ=environ,
        read_only=[source.workdir],
        writable=[target.workdir],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            output, _ = await started.process.communicate()
    except TimeoutError:
        kill_group(started.process.pid)
        raise SandboxError(f"copying an episode's folder took more than {SETUP_TIMEOUT_S:g}s") from None
    finally:
        await started.end()  # its own namespaces or process group only: the source's env and agent play on
    if started.process.returncode != 0:  # e.g. a folder its agent made unreadable: no partial copy is handed out
        said = output.decode("utf-8", errors="replace").strip()[-2000:]
        raise SandboxError(f"copying an episode's folder failed (cp exited with {started.process.returncode}): {said}")
    if owner is not None:
        await asyncio.to_thread(give, target.workdir, owner)
        os.chown(target.workdir, owner, owner if group is None else group)
    os.chmod(target.workdir, mode)


def _empty(folder: Path) -> None:
    """Remove everything in `folder`, not the folder (blocking)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            remove_tree(Path(entry.path))
        else:
            os.unlink(entry.path)
