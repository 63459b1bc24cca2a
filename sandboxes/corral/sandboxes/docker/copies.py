"""A fork's copy of a docker episode's files (`DockerSandbox.copy_to`, fork = "copy").

The target is a fresh container of the same image and hardening. Its writable folders (tmpfs
mounts, which neither `docker commit` nor the archive API sees, and whose sparse files a commit
would write out whole) are emptied of what its reset wrote, then filled by `tar` streamed over
two execs, as the verifier's copy is (docker.verify.copy_writable): packed in the source as the
folders' owner (it reads nothing that user could not) and unpacked in the target as the same
uid, which there is the target's own agent. Nothing is sent to a container's network address,
and the target's tmpfs sizes bound what it holds; the stream itself is cut at twice that.
"""

from __future__ import annotations

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.execs import Exec
from corral.sandboxes.docker.verify import SETUP_TIMEOUT_S, copy_writable
from corral.sandboxes.shared.users import owner_of_writable

FIND = "/usr/bin/find"


async def copy_folders(engine: Engine, spec: SandboxSpec, source: str, target: str) -> None:
    """The module docstring's steps; SandboxError when the copy cannot be made."""
    if not spec.writable:  # nothing to copy (and find given no folder would search its working folder)
        return
    user = owner_of_writable(spec)
    empty = await Exec.start(
        engine, target, [FIND, *spec.writable, "-mindepth", "1", "-delete"], user=user, workdir="/"
    )
    code, output = await empty.output(timeout_s=SETUP_TIMEOUT_S, keep=1000)
    if code != 0:
        raise SandboxError(f"could not empty a fork's copy's folders before copying: {output or empty.stderr_tail()}")
    failed, skipped = await copy_writable(engine, spec, source, target, user=user)
    if failed is not None or skipped:  # no copy is handed out missing part of the state
        raise SandboxError((failed or f"some files could not be copied: {skipped}").removeprefix("[corral] "))
