"""How to serve a bundle (`ServeOptions`), each setting declared once: its name, type, default
and help. `corral serve` makes its flags from these fields (`corral.cli.options.serve_flags`),
as TRL's configs are its command line, so a field added here is a flag with its help.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.protocol.rewards import RewardRule

FLAG = "flag"  # the metadata key of a field's Flag


@dataclass(frozen=True)
class Flag:
    """A ServeOptions field as `corral serve` takes it: its help text, and where the flag is not
    simply the field's name and type, how it differs."""

    help: str
    name: str | None = None  # the flag's name (--NAME), when it is not the field's
    type: Any = None  # the flag's type, when the field's holds more than a command line can say
    envvar: str | None = None  # read when the flag is not given
    min: float | None = None
    max: float | None = None


def flag(help: str, **how: Any) -> dict[str, Flag]:
    """The metadata of a ServeOptions field that `corral serve` takes as a flag (`how`: Flag's
    other fields)."""
    return {FLAG: Flag(help, **how)}


def _twice_the_cpus() -> int:
    # A start is mostly an interpreter booting: hundreds at once would starve the server's loop
    # of CPU, and handshakes time out.
    return max(4, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class ServeOptions:
    """How to serve a bundle; None takes the bundle's [serve] value, then corral's default.
    Every field but the last two is a flag of `corral serve`, in this order."""

    sandbox: str = field(
        default="auto",
        metadata=flag(
            "Where episodes run: auto (docker when an engine answers, else local), docker (a hardened container each), local (a child process each; no isolation), modal (a Modal Sandbox each, in Modal's cloud) or kubernetes (a hardened pod each; docs/kubernetes.md)."
        ),
    )
    warm_pool: int = field(
        default=0,
        metadata=flag(
            "Started sandboxes kept waiting per env, so a reset skips the sandbox's start.",
            envvar="CORRAL_WARM_POOL",
            min=0,
        ),
    )
    instance: str | None = field(  # whose leftovers (containers, local folders) the reaper removes on start
        default=None,
        metadata=flag(
            "This server's name on its containers and local folders; on start it removes what a killed run of the same name left, and a second server of the name refuses (default: HOSTNAME-PORT).",
            envvar="CORRAL_INSTANCE",
        ),
    )
    max_concurrent_envs: int = field(
        default=8,
        metadata=flag(
            "Sessions allowed at once; a trainer holds one per rollout it generates at once.",
            envvar="MAX_CONCURRENT_ENVS",
            min=1,
        ),
    )
    reward: RewardRule = field(
        default=None,
        metadata=flag("The score id that is the reward, for tasks that record several scores.", type=str | None),
    )
    tool_timeout_s: float | None = field(
        default=None,
        metadata=flag(
            "Seconds one tool call may take before its episode ends unscored (default: the bundle's, else 60).",
            name="tool-timeout",
        ),
    )
    reset_timeout_s: float | None = field(
        default=None,
        metadata=flag(
            "Seconds a reset (deploy and task load) or an end_turn may take (default: the bundle's, else 600).",
            name="reset-timeout",
        ),
    )
    token: str | None = field(
        default=None,
        metadata=flag(
            "Require 'Authorization: Bearer TOKEN' on every request. On the command line any process on this machine can read it (/proc/PID/cmdline): prefer CORRAL_TOKEN or --token-file.",
            envvar="CORRAL_TOKEN",
        ),
    )
    max_frame_mb: float = field(
        default=4.0,
        metadata=flag(
            "The largest WebSocket frame a client may send, in MB; a larger one closes its socket (1009).", min=0.01
        ),
    )
    verifier_workers: int = field(default=2, metadata=flag("Processes that run the bundle's Python verifiers.", min=1))
    # A default worked out on this machine: the flag shows none, and takes it when not given.
    concurrent_starts: int = field(
        default_factory=_twice_the_cpus,
        metadata=flag(
            "Sandboxes starting at once; more resets wait their turn (default: twice the CPUs, at least 4).", min=1
        ),
    )
    network: str | None = field(
        default=None,
        metadata=flag(
            "Harbor tasks: none (each runs offline; one that asks for a network is left out, and listed) or egress (each gets the network it asks for). Default: the folder's bundle.toml, else none."
        ),
    )
    record_dir: Path | None = field(
        default=None,
        metadata=flag(
            "Record every episode in DIR (JSON lines and an SQLite index; list them with `corral episodes DIR`); default: the bundle's [serve] record.",
            name="record",
        ),
    )
    unsafe_local_shell: bool = field(
        default=False,
        metadata=flag(
            "--sandbox local where bubblewrap cannot run: serve envs whose tools give the agent a shell or files anyway, though their processes then share this machine's files, processes and network (corral's own API included). Never on a machine with anything to protect."
        ),
    )
    # Not flags: the bounds on what one tool call sends and gets back.
    max_argument_bytes: int = 1024 * 1024  # a tool call's arguments, as JSON
    max_output_chars: int = 1_000_000  # a tool's answer; a longer one is cut in the middle, with a note

    @property
    def max_frame_bytes(self) -> int:
        """The largest WebSocket frame a client may send, in bytes."""
        return int(self.max_frame_mb * 1024 * 1024)
