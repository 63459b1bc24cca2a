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

Resolution is done here, in Python, one step at a time, like the kernel's: each path it
reaches is lstat'ed in the verifier's container by the tests' own user (what those tests
could reach), in batches, by `/bin/sh` and `readlink` of the image, before the tests start.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Iterable, Sequence

from corral.sandboxes.docker_engine import Engine
from corral.sandboxes.docker_exec import Exec
from corral.sandboxes.links import Walk
from corral.sandboxes.links import walk as resolution

BATCH_BYTES = 64 * 1024  # paths per query, in bytes of arguments: far below ARG_MAX
ADDED_OR_CHANGED = (0, 1)  # the engine's diff kinds; 2 is deleted
# For each path: N (not a link, or missing, or out of reach) or L<length>:<its target's bytes>.
# `echo .` keeps trailing newlines of a target, which command substitution would strip.
TARGET = 't=$(readlink "$p"; echo .); t=${t%?.}; printf "L%s:%s" "${#t}" "$t"'
QUERY = f'export LC_ALL=C; for p do if [ -L "$p" ]; then {TARGET}; else printf N; fi; done'
# Every link under a folder ($1): P<length>:<its path's bytes>, then its target as above.
PAIRS = f'export LC_ALL=C; for p do printf "P%s:%s" "${{#p}}" "$p"; {TARGET}; done'
UNDER = 'find "$1" -xdev -type l -exec /bin/sh -c "$2" corral-links {} +'



async def forged_links(engine: Engine, container: str, user: str, changed: Iterable[dict],
                       forbidden: Sequence[str]) -> list[str]:
    """What is wrong with the links among `changed` (the engine's diff of the agent's container),
    resolved in `container` as `user`: one line for each that leads into `forbidden` or /proc."""
    paths = [entry["Path"] for entry in changed if entry.get("Kind") in ADDED_OR_CHANGED]
    try:
        return await _judge(engine, container, user, paths, [path.encode() for path in forbidden])
    except ValueError as error:  # what the image's sh, readlink or find answered cannot be read
        return [str(error)]


async def forged_links_under(engine: Engine, container: str, user: str, folders: Sequence[str],
                             forbidden: Sequence[str]) -> list[str]:
    """`forged_links` for every link under `folders` (a corral env's writable folders, as copied
    for its command verifier, which brings its files in at `forbidden`)."""
    try:
        links: dict[bytes, bytes] = {}
        for folder in folders:
            links.update(await _links_under(engine, container, user, folder))
        if not links:
            return []
        roots = [path.encode() for path in forbidden]
        return await _judge_links(engine, container, user, links, roots + await _resolve(engine, container, user, roots))
    except ValueError as error:
        return [str(error)]


async def _judge(engine: Engine, container: str, user: str, paths: list[str], roots: list[bytes]) -> list[str]:
    named = [path.encode() for path in paths if "\ufffd" not in path]
    # Where the folders are mounted: their paths as links there resolve (docker's own rule),
    # found while the agent's paths are looked at.
    targets, resolved = await asyncio.gather(_lstat(engine, container, user, named), _resolve(engine, container, user, roots))
    links = {path: target for path, target in zip(named, targets, strict=True) if target is not None}
    # The engine's diff (JSON) mangles a name that is not UTF-8: every link under the nearest
    # folder it names right is looked at instead.
    for folder in dict.fromkeys(_named_ancestor(path) for path in paths if "\ufffd" in path):
        links.update(await _links_under(engine, container, user, folder))
    return await _judge_links(engine, container, user, links, roots + resolved)


async def _resolve(engine: Engine, container: str, user: str, roots: list[bytes]) -> list[bytes]:
    """Where `roots` resolve in the container (a mount at a linked path is where the link leads)."""
    resolved = await _run_walks(engine, container, user, {root: resolution(b"/", root, []) for root in roots})
    return [path for path in resolved.values() if isinstance(path, bytes)]


async def _judge_links(engine: Engine, container: str, user: str, links: dict[bytes, bytes],
                       roots: list[bytes]) -> list[str]:
    if not links:
        return []
    walks = {path: resolution(posixpath.dirname(path), target, roots) for path, target in links.items()}
    found = await _run_walks(engine, container, user, walks)
    return [f"{path.decode(errors='replace')} -> {links[path].decode(errors='replace')}: {why}"
            for path, why in found.items() if isinstance(why, str)]


def _named_ancestor(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:next(at for at, part in enumerate(parts) if "\ufffd" in part)]) or "/"


async def _run_walks(engine: Engine, container: str, user: str, walks: dict[bytes, Walk]) -> dict[bytes, bytes | str]:
    """Step every walk together, one query per round, until each has ended: what each returned."""
    ended: dict[bytes, bytes | str] = {}
    asked: dict[bytes, bytes] = {}
    for name, walk in walks.items():
        _step(name, walk, None, asked, ended, first=True)
    while asked:
        names = list(asked)
        answers = await _lstat(engine, container, user, [asked[name] for name in names])
        asked = {}
        for name, answer in zip(names, answers, strict=True):
            _step(name, walks[name], answer, asked, ended, first=False)
    return ended


def _step(name: bytes, walk: Walk, answer: bytes | None, asked: dict[bytes, bytes], ended: dict, *,
          first: bool) -> None:
    try:
        asked[name] = next(walk) if first else walk.send(answer)
    except StopIteration as done:
        ended[name] = done.value


async def _lstat(engine: Engine, container: str, user: str, paths: Sequence[bytes]) -> list[bytes | None]:
    """Each path's link target, or None where it is no link, in batches of BATCH_BYTES."""
    found: list[bytes | None] = []
    start = 0
    while start < len(paths):
        end, size = start, 0
        while end < len(paths) and (end == start or size + len(paths[end]) < BATCH_BYTES):
            size += len(paths[end]) + 1
            end += 1
        found += await _query(engine, container, user, paths[start:end])
        start = end
    return found


async def _query(engine: Engine, container: str, user: str, paths: Sequence[bytes]) -> list[bytes | None]:
    output, stderr = await _run(engine, container, user, [QUERY, "corral-links", *(path.decode() for path in paths)])
    found = [value for _, value in _fields(output, b"NL", stderr)]
    if len(found) != len(paths):
        raise ValueError(f"the link check answered {len(found)} of {len(paths)} paths: {stderr}")
    return found


async def _links_under(engine: Engine, container: str, user: str, folder: str) -> dict[bytes, bytes]:
    """Every link under `folder`, with its target."""
    output, stderr = await _run(engine, container, user, [UNDER, "corral-find", folder, PAIRS])
    fields = _fields(output, b"PL", stderr)
    pairs = list(zip(fields[::2], fields[1::2], strict=False))
    if len(fields) % 2 or any((path[0], target[0]) != (b"P", b"L") for path, target in pairs):
        raise ValueError(f"the link check could not list the links under {folder}: {stderr}")
    return {path: target for (_, path), (_, target) in pairs if path is not None and target is not None}


async def _run(engine: Engine, container: str, user: str, arguments: list[str]) -> tuple[bytes, str]:
    """`/bin/sh -c` with `arguments` as `user` in `container`: its stdout, and its stderr's tail."""
    query = await Exec.start(engine, container, ["/bin/sh", "-c", *arguments], user=user, workdir="/")
    output = bytearray()
    try:
        while chunk := await query.stream.read():
            output += chunk
    finally:
        await query.stream.close()
    return bytes(output), query.stderr_tail()


def _fields(output: bytes, tags: bytes, stderr: str) -> list[tuple[bytes, bytes | None]]:
    """The answer read as fields: N alone, or a tag of `tags` with <length>:<bytes>; a
    ValueError when it is anything else (the check then fails)."""
    found: list[tuple[bytes, bytes | None]] = []
    at = 0
    while at < len(output):
        tag = output[at:at + 1]
        if tag == b"N" and b"N" in tags:
            found.append((tag, None))
            at += 1
            continue
        colon = output.find(b":", at)
        if tag not in tags or colon < 0 or not output[at + 1:colon].isdigit():
            raise ValueError(f"the link check's answer cannot be read: {stderr}")
        end = colon + 1 + int(output[at + 1:colon])
        if end > len(output):
            raise ValueError(f"the link check's answer was cut short: {stderr}")
        found.append((tag, output[colon + 1:end]))
        at = end
    return found
