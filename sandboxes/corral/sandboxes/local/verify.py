"""Command verifiers of a local episode: on a copy of its folder, none of its processes left.

`LocalSandbox.verify`, once every process of the episode is gone, makes
`<episode>/verify-N/` with three folders:

- `files/`: the verifier's files, written by the server: files 0444, folders 0555. When the
  server runs as root they are root's, and the env's uid cannot change them; otherwise only
  their mode protects them, which the env's user (the server's) could undo.
- `work/`: a copy of the env's working folder, made by `cp -a` run as the env's user (so the
  copy reads nothing that user could not), at most the size the docker sandbox would allow
  (`scratch_mb` per writable folder); more is the agent's doing and fails the verifier. What
  `cp` cannot read (a folder the agent made mode 000) is left out, and the tests say so.
- `tmp/`: the command's TMPDIR; `home/`: its HOME.

Where the server can (root: local.quota), `verify-N/` is a tmpfs sized for the files, the copy
and as much again, so what the tests (and the agent's code they run) write is bounded too.

Bytecode is removed from the copy (pristine.BYTECODE), and a link in it that leads into
`files/`, `home/` or /proc stops the verifier (links.py): it would read as the verifier's own.
The copy runs as the agent's user (it reads what the agent could, and nothing more), the
command as the verifier's, with the minimal environment envs get, made pristine (pristine.py);
where the episode has three users (local.procs.Users) the server gives the copy to the
verifier's user before the command runs, so the verifier runs as no user any process of the
agent's or the env's ever ran as. Elsewhere all three are the env's user.
Where bwrap runs (local.namespace), each in fresh namespaces that see the system read-only
and nothing of this machine's files but what it needs: the copy, the agent's `work/`
(read-only) and the new `work/`; the command, `files/` (read-only), the new `work/` and
`tmp/` and `home/`; so nothing the agent left can reach them, and when each ends its namespace goes with
every process in it. Elsewhere, in a process group of their own, and at the deadline or the
end every process marked as the verifier's (or, as root, of the env's uid) is killed. The
verdict is the command's exit status, which the server reads as its parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from corral.sandboxes.base import CommandResult, SandboxSpec
from corral.sandboxes.local.namespace import Contained
from corral.sandboxes.local.procs import Users, minimal_environment
from corral.sandboxes.local.quota import Quotas, unbind_all_under
from corral.sandboxes.shared.links import forged_links_here, stopped_by
from corral.sandboxes.shared.pristine import pristine_environment, remove_bytecode
from corral.sandboxes.shared.trees import remove_tree, walk

SETUP_TIMEOUT_S = 120.0  # copying the env's folder: the platform's part, apart from the command's deadline
ENTRY_BYTES = 512  # what each file or folder costs in the copy's size, beside its content
OUTPUT_GRACE_S = 1.0  # after the command exits, how long its output may keep coming


class VerifiedSandbox(Protocol):
    """What a verifier needs of a local episode's sandbox (a LocalSandbox)."""

    spec: SandboxSpec
    folder: Path  # the server's folder of the episode
    workdir: Path  # the env's working folder
    users: Users | None  # the episode's uids, None: the server's user's
    marker: str  # the start of every CORRAL_SANDBOX of the episode
    verifications: int

    @property
    def share_mb(self) -> int: ...  # what the env may keep in its work folder

    @property
    def quotas(self) -> Quotas: ...

    def own(self, path: Path, mode: int = 0o700, *, uid: int | None = None, gid: int | None = None) -> None: ...

    async def spawn(
        self,
        command: Sequence[str],
        *,
        uid: int | None,
        cwd: Path,
        environ: dict[str, str],
        read_only: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        **popen,
    ) -> Contained: ...

    async def end(self, started: Contained, marker: str) -> None: ...


async def verify_on_a_copy(
    sandbox: VerifiedSandbox,
    files: Mapping[str, bytes],
    command: Callable[[str], Sequence[str]],
    *,
    timeout_s: float,
    keep: int,
) -> CommandResult:
    """The module docstring's steps, for one command verifier of `sandbox`'s episode."""
    sandbox.verifications += 1
    where = sandbox.folder / f"verify-{sandbox.verifications}"
    where.mkdir(mode=0o755)  # listable by the env's uid: Landlock-using runners grant what they can list
    files_dir, work, tmp, home = where / "files", where / "work", where / "tmp", where / "home"
    try:
        # Room for the verifier's files, the copy and as much again for what the tests write.
        sandbox.quotas.bound(where, 2 * sandbox.share_mb + 1 + sum(map(len, files.values())) // 2**20, mode=0o755)
        await asyncio.to_thread(write_files, files_dir, files)
        users = sandbox.users
        agent, verifier = (users.agent, users.verifier) if users is not None else (None, None)
        sandbox.own(work, uid=agent)
        for folder in (tmp, home):
            sandbox.own(folder, uid=verifier)
        most = sandbox.share_mb
        if await asyncio.to_thread(larger_than, sandbox.workdir, most * 2**20):
            return CommandResult(
                1,
                f"[corral] the env's folder holds more than {most} MB (scratch_mb in env.toml "
                "bounds each writable folder); nothing was verified",
            )
        marker = f"{sandbox.marker}verify-{sandbox.verifications}"
        environ = pristine_environment(minimal_environment(work, tmp, marker), home=str(home))
        copied = await _run(
            sandbox,
            ["cp", "-a", f"{sandbox.workdir}/.", str(work)],
            agent,
            cwd=work,
            environ=environ,
            read_only=[sandbox.workdir],
            writable=[work],
            marker=marker,
            timeout_s=SETUP_TIMEOUT_S,
            keep=2000,
        )
        if copied.exit_code is None:
            return CommandResult(1, f"[corral] the agent's files could not be copied for verifying: {copied.output}")
        await asyncio.to_thread(remove_bytecode, work)  # no process of the agent's is left to race it
        # An answer linked to the verifier's files or to /proc/self/fd/3 would read as theirs.
        if forged := await asyncio.to_thread(forged_links_here, str(work), [str(files_dir), str(home)]):
            return CommandResult(1, stopped_by(forged))
        if verifier != agent:
            await asyncio.to_thread(give, work, verifier)
        verdict = await _run(
            sandbox,
            list(command(str(files_dir))),
            verifier,
            cwd=work,
            environ=environ,
            read_only=[files_dir],
            writable=[work, tmp, home],
            marker=marker,
            timeout_s=timeout_s,
            keep=keep,
        )
        if copied.exit_code == 0:
            return verdict
        # What the agent made unreadable (a folder of mode 000) is left out; the tests run on the rest.
        skipped = f"[corral] some of the agent's files could not be copied, and are left out: {copied.output.strip()}\n"
        return CommandResult(verdict.exit_code, skipped + verdict.output, verdict.results)
    finally:
        await asyncio.to_thread(unbind_all_under, where)
        await asyncio.to_thread(remove_tree, where)


async def _run(
    sandbox: VerifiedSandbox,
    command: Sequence[str],
    uid: int | None,
    *,
    cwd: Path,
    environ: dict[str, str],
    read_only: Sequence[Path],
    writable: Sequence[Path],
    marker: str,
    timeout_s: float,
    keep: int,
) -> CommandResult:
    """`command` as `uid` (None: the server's user), seeing `read_only` and `writable` where it runs in
    namespaces (else everything its user may); its exit code (None at the deadline) and its
    output's tail. Everything it started is killed when it ends."""
    try:
        started = await sandbox.spawn(
            command,
            uid=uid,
            cwd=cwd,
            environ=environ,
            read_only=read_only,
            writable=writable,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as error:
        return CommandResult(exit_code=127, output=f"could not run {command[0]!r}: {error}")
    process = started.process
    output = bytearray()

    async def read() -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            output.extend(chunk)
            del output[: -keep * 4]  # characters are at most 4 bytes

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(timeout_s):
            exit_code: int | None = await process.wait()
        # Something it left in the background may hold the output open: a moment, no more.
        await asyncio.wait([reader], timeout=OUTPUT_GRACE_S)
    except TimeoutError:
        exit_code = None
    finally:
        # Also on cancellation (the session went away): nothing the command started stays.
        await sandbox.end(started, marker)
        await asyncio.wait([reader], timeout=OUTPUT_GRACE_S)
        reader.cancel()
    return CommandResult(exit_code, output.decode("utf-8", errors="replace")[-keep:])


def write_files(folder: Path, files: Mapping[str, bytes]) -> None:
    """`files` under `folder`, read-only: files 0444, folders 0555 (blocking)."""
    folder.mkdir()
    for relative, content in files.items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(0o444)
    for root, _, _ in walk(folder):
        os.chmod(root, 0o555)


def give(folder: Path, uid: int | None) -> None:
    """Make `folder` and all in it `uid`'s, group and owner, links themselves rather than what
    they point at (blocking; root only). What a path cannot name (deeper than the system
    takes) stays the agent's: the verifier may read it as the copy left it, not change it."""
    assert uid is not None
    os.chown(folder, uid, uid)
    for root, dirs, names in walk(folder):
        for name in dirs + names:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(root, name), uid, uid)


def larger_than(folder: Path, limit: int) -> bool:
    """Whether the files under `folder` come to more than `limit` bytes, by their sizes (a
    sparse file counts whole: a copy would be) plus 512 bytes an entry, as in an archive (a
    million empty files cost as much as docker's copy counts them); a file's hard links count
    its size once, as `cp -a` and `tar` copy it once; links are not followed (blocking)."""
    total = 0
    seen: set[tuple[int, int]] = set()  # (device, inode) of what has more than one link
    for root, dirs, names in walk(folder):
        for name in names + dirs:
            try:
                found = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            inode = (found.st_dev, found.st_ino)
            total += ENTRY_BYTES + (0 if inode in seen else found.st_size)
            if found.st_nlink > 1:
                seen.add(inode)
            if total > limit:
                return True
    return False
