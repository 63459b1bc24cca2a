"""The sandbox interface: where one episode's env process runs.

A provider starts a sandbox from a `SandboxSpec`; the server then speaks to the env process
over the sandbox's stdio stream (newline-delimited JSON-RPC, see `corral.env.runtime`) and
closes the sandbox when the episode ends. Nothing connects to the sandbox over the network.
After the agent's last turn a command verifier may copy files in (`put_files`) and run a
command beside the env (`run`), e.g. a task's tests that the agent never saw.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

NetworkPolicy = Literal["none", "egress"]


@dataclass(frozen=True)
class Resources:
    """Limits a provider enforces where it can (the local provider cannot)."""

    cpus: float = 1.0
    memory_mb: int = 512
    pids: int = 256


@dataclass(frozen=True)
class SandboxSpec:
    """What to run for one episode: an env folder and the command that serves it on stdio."""

    env_name: str
    context_dir: Path
    command: tuple[str, ...]
    resources: Resources = field(default_factory=Resources)
    network: NetworkPolicy = "none"
    labels: dict[str, str] = field(default_factory=dict)


class SandboxError(RuntimeError):
    """A sandbox could not be started, or its process is gone."""


@dataclass(frozen=True)
class CommandResult:
    """How a command run in a sandbox ended: its exit code (None when it timed out) and output."""

    exit_code: int | None
    output: str


class Sandbox(abc.ABC):
    """One running env process, reached over its stdin/stdout."""

    @abc.abstractmethod
    async def send_line(self, line: bytes) -> None:
        """Write one protocol line (without its newline) to the env's stdin."""

    @abc.abstractmethod
    async def read_line(self) -> bytes:
        """Read one protocol line from the env's stdout; raise EOFError when it has closed."""

    @abc.abstractmethod
    def stderr_tail(self, max_chars: int = 4000) -> str:
        """The end of what the env wrote to stderr, kept for debugging a failed episode."""

    @abc.abstractmethod
    async def put_files(self, files: Mapping[str, bytes]) -> str:
        """Copy `files` (relative path -> content) into a fresh folder the env's user cannot
        write; return that folder's absolute path inside the sandbox."""

    @abc.abstractmethod
    async def run(self, command: Sequence[str], *, timeout_s: float, max_output_chars: int = 20_000) -> CommandResult:
        """Run `command` in the env's working directory as the env's user, beside the env;
        keep the tail of its combined stdout and stderr. Kill it at `timeout_s`."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the env and everything it started. Safe to call twice."""


class SandboxProvider(abc.ABC):
    """Starts sandboxes of one kind (local processes, Docker containers, ...)."""

    name: str
    isolated: bool

    @abc.abstractmethod
    async def start(self, spec: SandboxSpec) -> Sandbox:
        """Start the env process of `spec`; raise SandboxError when it cannot start."""

    async def aclose(self) -> None:
        """Stop every sandbox this provider still has running."""
