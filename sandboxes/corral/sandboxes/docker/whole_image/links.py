"""Links the agent left that lead where the verifier brings its own files in.

A Harbor task's tests run in a copy of what the agent left, with their files (/tests), their
results folder (/logs/verifier) and their HOME mounted fresh. Those folders did not exist in
the agent's container, so it cannot have hard-linked into them (and a hard link cannot cross
into a volume), but a symbolic link it made resolves at read time: an answer file linked to
/tests/data/expected.json reads as the expected answer. `forged_links` finds every link the
agent made (the engine's diff of its container, so none of the image's own links) whose
resolution, step by step and through any chain of links, absolute or relative, enters one of
those folders, or /proc at all: a path through /proc (/proc/self/cwd, /proc/self/fd/3,
/proc/2/root, /dev/fd/...) depends on the process that reads it, so it cannot be judged here.

The resolution is shared.shell_links', each step lstat'ed in the verifier's container by the tests'
own user (what those tests could reach), through `docker exec`. And every link the agent made
is followed by the agent's own user there: one whose end that user cannot read, but the tests
find, would have the tests read for the agent what it could not (its link to /root/answer-key.txt
of mode 600, read by root tests), so it stops them too, wherever it leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.execs import Exec
from corral.sandboxes.shared import shell_links
from corral.sandboxes.shared.shell_links import Shell, judge_links, links_under, lstat, resolve, unreadable_links

ADDED_OR_CHANGED = (0, 1)  # the engine's diff kinds; 2 is deleted


async def forged_links(
    engine: Engine, container: str, user: str, changed: Iterable[dict], forbidden: Sequence[str], agent: str
) -> list[str]:
    """What is wrong with the links among `changed` (the engine's diff of the agent's container),
    resolved in `container` as `user`: one line for each that leads into `forbidden` or /proc,
    or where `agent` (the agent's user) cannot read."""
    paths = [entry["Path"] for entry in changed if entry.get("Kind") in ADDED_OR_CHANGED]
    tests = exec_shell(engine, container, user)
    try:
        return await _judge(tests, exec_shell(engine, container, agent), paths, [path.encode() for path in forbidden])
    except ValueError as error:  # what the image's sh, readlink or find answered cannot be read
        return [str(error)]


async def forged_links_under(
    engine: Engine, container: str, user: str, folders: Sequence[str], forbidden: Sequence[str], agent: str | None
) -> list[str]:
    """shared.shell_links.forged_links_under, in `container` as `user`, each link also followed by
    `agent` (the agent's own user; None where it has none)."""
    agent_shell = exec_shell(engine, container, agent) if agent is not None else None
    return await shell_links.forged_links_under(exec_shell(engine, container, user), folders, forbidden, agent_shell)


def exec_shell(engine: Engine, container: str, user: str) -> Shell:
    """`/bin/sh -c` with the arguments given, as `user` in `container`."""

    async def run(arguments: list[str]) -> tuple[bytes, str]:
        query = await Exec.start(engine, container, ["/bin/sh", "-c", *arguments], user=user, workdir="/")
        output = bytearray()
        try:
            while chunk := await query.stream.read():
                output += chunk
        finally:
            await query.stream.close()
        return bytes(output), query.stderr_tail()

    return run


async def _judge(shell: Shell, agent: Shell, paths: list[str], roots: list[bytes]) -> list[str]:
    named = [path.encode() for path in paths if "\ufffd" not in path]
    # Where the folders are mounted: their paths as links there resolve (docker's own rule),
    # found while the agent's paths are looked at.
    targets, resolved = await asyncio.gather(lstat(shell, named), resolve(shell, roots))
    links = {path: target for path, target in zip(named, targets, strict=True) if target is not None}
    # The engine's diff (JSON) mangles a name that is not UTF-8: every link under the nearest
    # folder it names right is looked at instead.
    for folder in dict.fromkeys(_named_ancestor(path) for path in paths if "\ufffd" in path):
        links.update(await links_under(shell, folder))
    return await judge_links(shell, links, roots + resolved) + await unreadable_links(agent, shell, list(links))


def _named_ancestor(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[: next(at for at, part in enumerate(parts) if "\ufffd" in part)]) or "/"
