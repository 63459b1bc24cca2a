"""Links the agent left that lead where the verifier brings its own files in, resolved in the
sandbox the verifier runs in, through a shell there (`Shell`: a provider runs `/bin/sh -c` with
the arguments it is given, as the verifier's user, and returns its stdout and stderr's tail).

Resolution is done here, in Python, one step at a time, like the kernel's (links.walk): each
path it reaches is lstat'ed in the sandbox by `/bin/sh` and `readlink` of the image, in
batches, before the verifier starts. docker.whole_image.links and modal.verify give it their shell.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable, Sequence

from corral.sandboxes.shared.links import Walk
from corral.sandboxes.shared.links import walk as resolution

Shell = Callable[[list[str]], Awaitable[tuple[bytes, str]]]
"""Runs `/bin/sh -c ARGUMENTS...` in the verifier's sandbox: its stdout, and its stderr's tail."""

BATCH_BYTES = 64 * 1024  # paths per query, in bytes of arguments: far below ARG_MAX
# Paths one check may lstat, each once: far past any real task's links, and a bound on the
# agent's chains of links, each a `readlink` run in the sandbox (20,000 links in one chain
# took docker 129 s before each path was asked once). Past it, the verifier does not run.
MOST_PATHS = 50_000
# For each path: N (not a link, or missing, or out of reach) or L<length>:<its target's bytes>.
# `echo .` keeps trailing newlines of a target, which command substitution would strip.
TARGET = 't=$(readlink "$p"; echo .); t=${t%?.}; printf "L%s:%s" "${#t}" "$t"'
# Paths travel as printf formats of ASCII (`_arguments`: a name need not be UTF-8, and an
# engine's API carries text), each made bytes again here, its trailing newlines kept.
EACH = 'export LC_ALL=C; for a do p=$(printf "$a."); p=${p%?}; '
QUERY = EACH + f'if [ -L "$p" ]; then {TARGET}; else printf N; fi; done'
# Every link under a folder ($1): P<length>:<its path's bytes>, then its target as above.
PAIRS = f'export LC_ALL=C; for p do printf "P%s:%s" "${{#p}}" "$p"; {TARGET}; done'
UNDER = 'find "$1" -xdev -type l -exec /bin/sh -c "$2" corral-links {} +'
# Each argument `[ -r ]` refuses (run as the agent's user), or reads (as the tests'),
# NUL-terminated: both follow every link to its end.
UNREADABLE = EACH + '[ -r "$p" ] || printf "%s\\0" "$p"; done'
READABLE = EACH + '[ -r "$p" ] && printf "%s\\0" "$p"; done; exit 0'


async def unreadable_links(agent: Shell, tests: Shell, links: Sequence[bytes]) -> list[str]:
    """One line for each of `links` (links the agent made) whose end its user (`agent`) cannot
    read and the tests' user (`tests`) can: through it the tests would read for the agent what
    it could not (an answer key of mode 600; /etc/shadow, where the tests run as root). A link
    that neither can read through (nowhere, or /etc/shadow for both) is no read at all, and passes."""
    refused = [path for batch in _batches(links) for path in await _listed(agent, UNREADABLE, batch)]
    found = [path for batch in _batches(refused) for path in await _listed(tests, READABLE, batch)]
    return [f"{path.decode(errors='replace')}: leads where the agent's user cannot read" for path in found]


async def _listed(shell: Shell, script: str, paths: Sequence[bytes]) -> list[bytes]:
    output, stderr = await shell([script, "corral-links", *_arguments(paths)])
    listed = output.split(b"\0")
    if listed.pop() != b"" or not set(listed) <= set(paths):
        raise ValueError(f"the link check's answer cannot be read: {stderr}")
    return listed


async def forged_links_under(
    shell: Shell, folders: Sequence[str], forbidden: Sequence[str], agent: Shell | None = None
) -> list[str]:
    """What is wrong with the links under `folders` (a corral env's writable folders, as copied
    for its command verifier, which brings its files in at `forbidden`), resolved by `shell`:
    one line for each that leads into `forbidden` or /proc, or, where the agent has a user of
    its own (`agent`, its shell), where that user cannot read (unreadable_links)."""
    try:
        links: dict[bytes, bytes] = {}
        for folder in folders:
            links.update(await links_under(shell, folder))
        if not links:
            return []
        roots = [path.encode() for path in forbidden]
        found = await judge_links(shell, links, roots + await resolve(shell, roots))
        return found + (await unreadable_links(agent, shell, list(links)) if agent is not None else [])
    except ValueError as error:
        return [str(error)]


async def resolve(shell: Shell, roots: list[bytes]) -> list[bytes]:
    """Where `roots` resolve in the container (a mount at a linked path is where the link leads)."""
    resolved = await _run_walks(shell, {root: resolution(b"/", root, []) for root in roots})
    return [path for path in resolved.values() if isinstance(path, bytes)]


async def judge_links(shell: Shell, links: dict[bytes, bytes], roots: list[bytes]) -> list[str]:
    """Each of the agent's links (path -> target) that, resolved through `shell`, must not be
    followed (it enters one of `roots`, where the verifier brings its own files in, or /proc,
    loops, or cannot be read), as a line saying why; empty when none does."""
    if not links:
        return []
    walks = {path: resolution(posixpath.dirname(path), target, roots) for path, target in links.items()}
    found = await _run_walks(shell, walks, known=dict(links))
    return [
        f"{path.decode(errors='replace')} -> {links[path].decode(errors='replace')}: {why}"
        for path, why in found.items()
        if isinstance(why, str)
    ]


async def _run_walks(
    shell: Shell, walks: dict[bytes, Walk], known: dict[bytes, bytes | None] | None = None
) -> dict[bytes, bytes | str]:
    """Step every walk together until each has ended: what each returned. Each path is asked
    of the sandbox once (`known`: the answers already had, a link's target or None), so links
    that lead through each other cost a query per path, not per step of every walk."""
    known = {} if known is None else known
    ended: dict[bytes, bytes | str] = {}
    waiting: dict[bytes, bytes] = {}  # a walk's name -> the path it waits to have lstat'ed
    asked = 0
    for name, walk in walks.items():
        _step(name, walk, None, waiting, ended, first=True)
    while waiting:
        unknown = list(dict.fromkeys(path for path in waiting.values() if path not in known))
        asked += len(unknown)
        if asked > MOST_PATHS:
            raise ValueError(
                f"the links the agent left take more than {MOST_PATHS:,} paths to resolve; "
                "the verifier does not run on what cannot be checked"
            )
        known.update(zip(unknown, await lstat(shell, unknown), strict=True))
        current, waiting = waiting, {}
        for name, path in current.items():
            _step(name, walks[name], known[path], waiting, ended, first=False)
    return ended


def _step(
    name: bytes, walk: Walk, answer: bytes | None, waiting: dict[bytes, bytes], ended: dict, *, first: bool
) -> None:
    try:
        waiting[name] = next(walk) if first else walk.send(answer)
    except StopIteration as done:
        ended[name] = done.value


async def lstat(shell: Shell, paths: Sequence[bytes]) -> list[bytes | None]:
    """Each path's link target, or None where it is no link, in batches of BATCH_BYTES."""
    return [target for batch in _batches(paths) for target in await _query(shell, batch)]


def _batches(paths: Sequence[bytes]) -> list[Sequence[bytes]]:
    """`paths` in runs of at most BATCH_BYTES of arguments (one path at least)."""
    found: list[Sequence[bytes]] = []
    start = 0
    while start < len(paths):
        end, size = start, 0
        while end < len(paths) and (end == start or size + len(paths[end]) < BATCH_BYTES):
            size += len(paths[end]) + 1
            end += 1
        found.append(paths[start:end])
        start = end
    return found


async def _query(shell: Shell, paths: Sequence[bytes]) -> list[bytes | None]:
    output, stderr = await shell([QUERY, "corral-links", *_arguments(paths)])
    found = [value for _, value in answer_fields(output, b"NL", stderr)]
    if len(found) != len(paths):
        raise ValueError(f"the link check answered {len(found)} of {len(paths)} paths: {stderr}")
    return found


_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%"), ord("\\")}


def _arguments(paths: Sequence[bytes]) -> list[str]:
    """Each path as a printf format of ASCII that prints its bytes (EACH reads them back)."""
    return ["".join(chr(byte) if byte in _PLAIN else f"\\{byte:03o}" for byte in path) for path in paths]


async def links_under(shell: Shell, folder: str) -> dict[bytes, bytes]:
    """Every link under `folder`, with its target."""
    output, stderr = await shell([UNDER, "corral-find", folder, PAIRS])
    found = answer_fields(output, b"PL", stderr)
    pairs = list(zip(found[::2], found[1::2], strict=False))
    if len(found) % 2 or any((path[0], target[0]) != (b"P", b"L") for path, target in pairs):
        raise ValueError(f"the link check could not list the links under {folder}: {stderr}")
    return {path: target for (_, path), (_, target) in pairs if path is not None and target is not None}


def answer_fields(output: bytes, tags: bytes, stderr: str) -> list[tuple[bytes, bytes | None]]:
    """The answer read as fields: N alone, or a tag of `tags` with <length>:<bytes>; a
    ValueError when it is anything else (the check then fails)."""
    found: list[tuple[bytes, bytes | None]] = []
    at = 0
    while at < len(output):
        tag = output[at : at + 1]
        if tag == b"N" and b"N" in tags:
            found.append((tag, None))
            at += 1
            continue
        colon = output.find(b":", at)
        if tag not in tags or colon < 0 or not output[at + 1 : colon].isdigit():
            raise ValueError(f"the link check's answer cannot be read: {stderr}")
        end = colon + 1 + int(output[at + 1 : colon])
        if end > len(output):
            raise ValueError(f"the link check's answer was cut short: {stderr}")
        found.append((tag, output[colon + 1 : end]))
        at = end
    return found
