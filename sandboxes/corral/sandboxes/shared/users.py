"""Who runs what in an env's container: the env process, the agent's processes, the verifier.

A corral env (its command bootstrapped into the SDK) with no user of its own gets three
identities. The container starts as root with no capability but the two that change uid and
gid and the one that signals any process; corral's runtime becomes ENV_USER at once, keeping
just those three (corral.env.agent), and starts the agent's commands as AGENT_USER, which then
holds none. So the agent's processes can neither signal, trace nor open the env, nor write its
files, while the env can stop theirs (a shell tool's timeout); the env's writable folders are
the agent's (the env writes what the agent will work on as the agent, with `agent.files()`).
The verifier runs as ENV_USER in a fresh container that no process of either ever ran in
(docker.verify). Any other env (its own command, a named user, an image run whole) runs as one
user, as before: there is no runtime in it to make the split.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.env.agent import AGENT_USER_VARIABLE, ENV_USER_VARIABLE
from corral.sandboxes.base import INODES_PER_MB, SandboxSpec
from corral.sandboxes.shared.bootstrap import bootstrapped

ENV_USER = "1000:1000"  # non-root even for an image without USER
AGENT_USER = "1001:1000"  # a uid of its own, in the env's group (what the env shares, it shares by group)
ROOT = "0:0"
SCRATCH = "/tmp"
ID_CAPABILITIES = ["SETUID", "SETGID", "KILL"]  # all the starting root keeps, and the env after it


def env_user(spec: SandboxSpec) -> str:
    """Who the env runs as (and the verifier, and `Sandbox.exec`): corral's non-root user, unless
    the spec names one ("" is the image's own USER, root included: its capabilities are dropped
    all the same)."""
    return ENV_USER if spec.user is None else spec.user


def agent_apart(spec: SandboxSpec) -> bool:
    """Whether the agent's processes get a user of their own (see the module docstring)."""
    return spec.user is None and not spec.writable_root and bootstrapped(spec.command) is not None


def owner_of_writable(spec: SandboxSpec) -> str:
    """Who owns the env's writable folders in its own container: the agent, where it is apart."""
    return AGENT_USER if agent_apart(spec) else ENV_USER


def launch(spec: SandboxSpec) -> tuple[str, list[str], dict[str, str]]:
    """The container's starting user, the capabilities it adds to none, and the variables that
    tell corral's runtime which users to take on."""
    if not agent_apart(spec):
        return env_user(spec), [], {}
    return ROOT, ID_CAPABILITIES, {ENV_USER_VARIABLE: ENV_USER, AGENT_USER_VARIABLE: AGENT_USER}


def process_users(spec: SandboxSpec) -> tuple[str, ...]:
    """Every user whose processes are the agent's or the env's helpers, to be stopped after the
    last turn (the env itself is PID 1, and immune)."""
    return (AGENT_USER, ENV_USER) if agent_apart(spec) else (env_user(spec),)


def scratch_mounts(spec: SandboxSpec, owner: str | None = None) -> dict[str, str]:
    """The tmpfs mounts: /tmp, shared and sticky (root-owned, as /tmp is), and each `writable`
    folder, owned by `owner` (by default the agent where it has a user of its own, else the
    env's user; a folder the image already has keeps its own mode whatever `mode=` says; `uid=` wins)."""
    options = f"rw,nosuid,nodev,size={spec.scratch_mb}m,nr_inodes={spec.scratch_mb * INODES_PER_MB}"
    uid, gid = (owner or owner_of_writable(spec)).split(":")
    return {
        SCRATCH: f"{options},mode=1777",
        **{path: f"{options},uid={uid},gid={gid},mode=0755" for path in spec.writable},
    }


def without_identities(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` without the variables `launch` adds (a verifier's container takes on no user)."""
    return {name: value for name, value in environment.items() if name not in (ENV_USER_VARIABLE, AGENT_USER_VARIABLE)}
