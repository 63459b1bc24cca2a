"""The agent's own identity: processes and files an env makes on the agent's behalf.

An env that runs commands for the agent (a shell tool) or writes files the agent will edit
does it through this module, so that where the sandbox gives the agent a user of its own (the
docker sandbox does) what the agent runs cannot signal, trace or write the env process or the
env's own files, while the env can still stop what the agent runs:

    from corral.env import agent

    process = agent.popen(["bash", "-c", command], stdout=subprocess.PIPE)
    with agent.files():
        Path("solution.py").write_text(text)   # owned by the agent, as if it had written it

Where the sandbox gives no such user (the local and Modal sandboxes), both run as the env
itself, as a plain `subprocess.Popen` and a plain block would.

How: the sandbox starts the env as root with only the capabilities to change uid and gid and
to signal any process, and names both users in two variables; `take_identity` (run by corral's
runtime before the env's code loads) becomes the env's user keeping just those three,
effective (without the third, a shell tool could not stop a timed-out command of the agent's). A child
made by `popen` switches to the agent's user before it executes its program, and an execve as
a user other than root keeps no capability: the agent's processes have none. `files` switches
the calling thread's filesystem uid and gid (Linux keeps them per thread) for the block.

The env gets a HOME of its own (0700, in the sandbox's /tmp): the one the sandbox gives is
the agent's to write (/tmp, or the working folder), and a program the env ran as itself
(git, pip, an interpreter) would read the agent's config from it (a git `core.fsmonitor` is a
command). The agent's processes keep the sandbox's HOME.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

# Set by a sandbox that gives the agent its own user, each as "uid:gid"; read once and removed,
# so neither the env's code nor its children see them.
ENV_USER_VARIABLE = "CORRAL_ENV_USER"
AGENT_USER_VARIABLE = "CORRAL_AGENT_USER"

_CAP_KILL, _CAP_SETGID, _CAP_SETUID = 5, 6, 7
_CAPABILITY_VERSION_3 = 0x20080522  # linux/capability.h: two 32-bit words per set
_PR_SET_KEEPCAPS = 8
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

_agent: tuple[int, int] | None = None  # (uid, gid) once take_identity has found one
_agent_home = ""  # the HOME the sandbox gave, the agent's; the env has its own
_started: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()  # by popen, for the orphan reaper to leave alone
# Held from fork to record, and by the reaper: a child that exits at once is not taken for an orphan.
starting = threading.Lock()


class IdentityError(Exception):
    """The sandbox named users that this process could not take on; the env must not run."""


def take_identity() -> None:
    """Become the env's user, keeping the right to start the agent's processes as the agent's
    and to stop them, when the sandbox names both users (see the module docstring); otherwise do nothing."""
    global _agent, _agent_home
    env_user, agent_user = os.environ.pop(ENV_USER_VARIABLE, ""), os.environ.pop(AGENT_USER_VARIABLE, "")
    if not (env_user and agent_user):
        return
    uid, gid = _parse(env_user)
    agent = _parse(agent_user)
    if os.getuid() != 0:
        raise IdentityError(f"{ENV_USER_VARIABLE} is set but the env runs as uid {os.getuid()}, not root")
    libc = ctypes.CDLL(None, use_errno=True)
    _checked(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "keep capabilities across setuid")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _set_capabilities(libc, (1 << _CAP_SETUID) | (1 << _CAP_SETGID) | (1 << _CAP_KILL))
    _checked(libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0), "reset keep-capabilities")
    _agent_home = os.environ.get("HOME", "/tmp")
    os.environ["HOME"] = tempfile.mkdtemp(prefix="corral-env-home-")  # a new name, made by the env alone
    _agent = agent


def identity() -> tuple[int, int] | None:
    """The agent's (uid, gid) where the sandbox gave it a user of its own, else None."""
    return _agent


def popen(args: Sequence[str] | str, **options: Any) -> subprocess.Popen:
    """`subprocess.Popen(args, **options)`, run as the agent's user with no capability and no
    supplementary group where it has one (`user`, `group` and `extra_groups` are this
    function's to set), with the agent's HOME where its variables would give it the env's."""
    if _agent is not None:
        options.update(user=_agent[0], group=_agent[1], extra_groups=[])
        variables = dict(os.environ if options.get("env") is None else options["env"])
        if variables.get("HOME") == os.environ.get("HOME"):
            options["env"] = {**variables, "HOME": _agent_home}
    with starting:
        process = subprocess.Popen(args, **options)
        _started.add(process)
    return process


def started() -> set[int]:
    """The pids of the processes `popen` started that have not been waited for yet (hold
    `starting` for an answer that no `popen` is about to change)."""
    return {process.pid for process in list(_started) if process.returncode is None}


def within_reach(path: str) -> bool:
    """Whether the agent could put files at `path` or replace it: it or an ancestor is the
    agent's, or writable by the agent's group or by all (an ancestor with the sticky bit
    only lets the agent replace what is its own, which the check of that entry finds), by the
    path as written or as its links resolve. A path that does not exist yet counts by its
    existing ancestors (the agent may create it). False where the agent has no user of its own."""
    if _agent is None:
        return False
    uid, gid = _agent
    path = os.path.abspath(path or ".")  # "" on sys.path is the working folder
    for spelling in {path, os.path.realpath(path)}:
        innermost = True  # the path, or the nearest ancestor that exists: writable at all is enough
        for folder in _self_and_ancestors(spelling):
            try:
                info = os.lstat(folder)
            except OSError:
                continue  # not there yet: its ancestors decide
            if stat.S_ISLNK(info.st_mode):  # its mode means nothing; its target is the other spelling
                innermost = False
                continue
            mode, guarded = info.st_mode, not innermost and info.st_mode & stat.S_ISVTX
            if (
                info.st_uid == uid
                or (mode & stat.S_IWOTH or info.st_gid == gid and mode & stat.S_IWGRP)
                and not guarded
            ):
                return True
            innermost = False
    return False


def _self_and_ancestors(path: str) -> Iterator[str]:
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


@contextlib.contextmanager
def files() -> Iterator[None]:
    """Within the block, this thread creates, reads and writes files as the agent's user: what
    it makes belongs to the agent, and what the agent could not touch it cannot either."""
    if _agent is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = _agent
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    try:
        # Each call returns the value before it: asking again tells whether the first took.
        if (libc.setfsgid(gid), libc.setfsuid(uid)) != (gid, uid):
            raise IdentityError(f"could not act as the agent's user {uid}:{gid}")
        yield
    finally:
        libc.setfsuid(os.geteuid())
        libc.setfsgid(os.getegid())


def _parse(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise IdentityError(f"expected uid:gid in {ENV_USER_VARIABLE} and {AGENT_USER_VARIABLE}, got {user!r}")
    return int(uid), int(gid)


def _set_capabilities(libc: ctypes.CDLL, mask: int) -> None:
    """Make `mask` (capabilities 0-31) this process's effective and permitted sets, and empty
    its inheritable set: capset(2), which Python's standard library does not offer."""
    number = _SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise IdentityError(f"no capset system call number known for {os.uname().machine}")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(mask, mask, 0, 0, 0, 0)  # effective, permitted, inheritable; twice
    _checked(libc.syscall(number, header, data), "set capabilities")


def _checked(result: int, what: str) -> None:
    if result != 0:
        raise IdentityError(f"could not {what}: {os.strerror(ctypes.get_errno())}")
