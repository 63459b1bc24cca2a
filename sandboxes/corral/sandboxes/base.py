"""The sandbox interface: where one episode's env process runs.

A provider starts a sandbox from a `SandboxSpec`; the server then speaks to the env process
over the sandbox's stdio stream (newline-delimited JSON-RPC, see `corral.env.runtime`) and
closes the sandbox when the episode ends. Nothing connects to the sandbox over the network.
After the agent's last turn a command verifier (a task's tests that the agent never saw) runs
through `verify`: on a copy of what the agent left, with none of its processes running.

Everything a kind of sandbox needs to know lives behind `SandboxProvider`: the server calls
`reap_leftovers`, `prepare` and `start_pools` before it accepts sessions, `start` for each
episode and `status` for its health check, and never asks which kind it holds.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from corral.errors import SandboxError

NetworkPolicy = Literal["none", "egress"]
NETWORK_POLICIES: tuple[NetworkPolicy, ...] = get_args(
    NetworkPolicy
)  # what env.toml, bundle.toml and --network may say
Progress = Callable[[str], None]  # one line of a long preparation (an image build's output)
# Files and folders a scratch tmpfs holds per MB of its size: empty files cost the kernel's
# memory, which a tmpfs's size does not count; one per KB is about as much memory again, at most.
INODES_PER_MB = 1024

log = logging.getLogger("corral.sandboxes")


@dataclass(frozen=True)
class Resources:
    """Limits a provider enforces where it can (local: `pids` as root, `memory_mb` per process)."""

    cpus: float = 1.0
    memory_mb: int = 512
    pids: int = 256
    disk_mb: int | None = None  # what an image run whole (writable_root) may write to its root; None: no bound


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a provider needs to run one env (its env.toml, read): the folder, the command
    that serves it on stdio, where its image comes from, its writable folders and its limits.

    Frozen and hashable: a provider keys what it prepared for an env (an image tag, a warm pool)
    by the spec itself. What differs per episode (its labels) is passed to `start` instead.
    """

    env_name: str
    context_dir: Path
    command: tuple[str, ...]
    image: str | None = None  # a prebuilt image, used as it is; None: build `context_dir`
    dockerfile: str = "Dockerfile"  # relative to context_dir
    writable: tuple[str, ...] = ()  # folders the env may write besides the scratch folder
    scratch_mb: int = 64  # the size of each writable folder, where the provider limits it (INODES_PER_MB)
    resources: Resources = field(default_factory=Resources)
    network: NetworkPolicy = "none"
    # Whether a tool of the env runs what the agent writes or reads and writes files it names
    # (a shell, an editor): the local provider serves such an env only where it can contain it.
    agent_shell: bool = True
    # An image run as a whole machine (a Harbor task's): its own user, working folder and
    # variables, and a root filesystem the agent may write anywhere in, which a verifier's copy
    # then holds whole. None and False are corral's envs: a non-root user of the provider's, a
    # read-only root with only `writable` to write in.
    user: str | None = None  # "": the image's own USER
    workdir: str | None = None  # None: the image's WORKDIR
    environment: tuple[tuple[str, str], ...] = ()
    writable_root: bool = False
    # A harness env's: each sandbox gets a folder of its own, read-only inside, where the server
    # listens on a Unix socket for the agent's model calls (`Sandbox.model_socket`); the network stays off.
    model_channel: bool = False


@dataclass(frozen=True)
class Prepared:
    """What `prepare` did for one env: the image it will run (None where a provider has no
    images), whether it had to be built, and how long preparing took."""

    env_name: str
    image: str | None
    built: bool
    seconds: float


@dataclass(frozen=True)
class ProviderStatus:
    """A provider's state for logs and /health."""

    kind: str  # "local", "docker", ...
    isolated: bool  # whether a sandbox is an isolation boundary (local: whether its namespaces run here)
    live: int  # sandboxes started for episodes and not yet closed
    warm: dict[str, int] = field(default_factory=dict)  # started sandboxes waiting, per env name
    warm_dry: dict[str, int] = field(default_factory=dict)  # resets that found no warm one, per env name


@dataclass(frozen=True)
class CommandResult:
    """How a command run in a sandbox ended: its exit code (None when it timed out) and output,
    and the result files it wrote that `Sandbox.verify` read back (by path; absent if not written)."""

    exit_code: int | None
    output: str
    results: Mapping[str, bytes] = field(default_factory=dict)


class SandboxProcess(abc.ABC):
    """A command started in a sandbox by `Sandbox.exec`: its stdin, its output (stdout and
    stderr together, as they came) and its exit code, as the sandbox reports it."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Send `data` to the command's stdin (started with `stdin=True`)."""

    @abc.abstractmethod
    async def close_stdin(self) -> None:
        """Send end-of-file to its stdin; its output keeps coming."""

    @abc.abstractmethod
    async def read(self) -> bytes:
        """Whatever output has come (waiting for some); b"" once it has ended."""

    @abc.abstractmethod
    async def exit_code(self) -> int | None:
        """Its exit code once it has ended (None if it never does within a few seconds)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop reading it; the command itself runs on until it ends."""


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
    async def verify(
        self,
        files: Mapping[str, bytes],
        command: Callable[[str], Sequence[str]],
        *,
        timeout_s: float,
        max_output_chars: int = 20_000,
    ) -> CommandResult:
        """Run a command verifier on what the agent left, once the agent can no longer act.

        The first call ends every process the agent started. Each call then copies the env's
        writable folders into a fresh process tree (docker: a fresh container of the same
        image), puts `files` (relative path -> content) into a folder the env's user cannot
        write, and runs `command(folder)` there as the env's user in the env's working
        directory, with a minimal environment; the exit code is read from outside, and the
        command is killed with everything it started at `timeout_s` (exit code None). A copy
        the agent made impossible (its folders over their size) is a failed command, not an
        error; SandboxError is for the platform's own failures.

        A spec with a `writable_root` (a Harbor task's image) may also be given, as keywords:
        `files_dir`, the absolute folder the files go in (Harbor's /tests); `results`, absolute
        paths of files the command may write (Harbor's reward files), whose folders start empty
        and which are read back from outside the command into `CommandResult.results`; `user`
        and `environment` for the command, in place of the env's. Only a provider that runs
        such specs (`SandboxProvider.whole_images`) takes them.
        """

    async def exec(self, command: Sequence[str], *, stdin: bool = False) -> SandboxProcess:
        """Start `command` in the sandbox beside the env, as the env's user in its working
        folder: how corral serves the agent's tools for an image with no env process of its
        own (a Harbor task's). Raises SandboxError, by default: a provider that cannot."""
        raise SandboxError(
            f"{type(self).__name__} cannot run commands beside its env; serve tasks that need it with --sandbox docker"
        )

    # Set by a provider that gives a spec with `model_channel` its folder: see model_socket.
    _model_socket: tuple[Path, str] | None = None

    def model_socket(self) -> tuple[Path, str] | None:
        """Where a harness agent's model calls leave this sandbox (a spec with `model_channel`):
        the Unix socket's path for the server to listen on, and the same socket's path inside
        the sandbox; None where the sandbox was given no channel."""
        return self._model_socket

    async def copy_to(self, target: Sandbox) -> None:
        """Replace the writable folders of `target` (a fresh sandbox of the same spec, started by
        the same provider, its env not yet called by an agent) with a copy of this sandbox's, as
        they are now: a fork's copy of an env whose state lives in its files (fork = "copy").
        The copy is read as this sandbox's agent could read it, bounded by the spec's disk
        bound (`scratch_mb` per writable folder), and is then the target's users' alone. Raises
        SandboxError when it cannot be made, by default: a provider that cannot copy."""
        raise SandboxError(
            f"{type(self).__name__} cannot copy a sandbox's files into another, so an env with "
            'fork = "copy" cannot be forked on it; serve it with --sandbox local or docker'
        )

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the env and everything it started. Safe to call twice."""

    @property
    def alive(self) -> bool:
        """Whether the env may still answer: a warm pool never hands out one that died waiting."""
        return True


class SandboxProvider(abc.ABC):
    """Starts sandboxes of one kind (local processes, Docker containers, ...).

    A server calls, in order: `reap_leftovers()`, `prepare(spec)` for each env, `start_pools(specs)`
    (on the loop that serves sessions), then `start(spec, labels)` per episode, and `aclose()`.
    """

    kind: str
    isolated: bool
    whole_images: bool = False  # runs a spec with `writable_root`: an image as a machine (a Harbor task's)
    model_channels: bool = False  # gives a spec with `model_channel` its socket folder (a harness env's)

    copies: bool = False  # its sandboxes copy their writable folders into another (Sandbox.copy_to)

    async def reap_leftovers(self) -> None:
        """Claim this server's instance and remove what a killed server of it left behind (by
        default, nothing); raise ConfigError when a live server holds the instance."""

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Make `spec` startable before sessions are accepted (by default, nothing to do);
        raise ImageError naming the env and the fix when it cannot be."""
        return Prepared(spec.env_name, image=None, built=False, seconds=0.0)

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep started sandboxes of `specs` waiting, where the provider can (by default, not)."""

    @abc.abstractmethod
    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        """Start the env process of `spec`, marked with `labels` where the provider can (e.g.
        `corral.session`, `corral.episode`); raise SandboxError when it cannot start."""

    @abc.abstractmethod
    def status(self) -> ProviderStatus:
        """What runs now: for logs and /health."""

    async def check(self) -> None:
        """Raise SandboxError when the provider itself cannot serve now (its engine stopped
        answering, say): an episode that ended then is the platform's failure, not the agent's."""

    async def aclose(self) -> None:
        """Stop every sandbox this provider still has running."""
