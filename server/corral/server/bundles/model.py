"""A bundle as read from disk, whatever its format (`formats` picks the reader): its envs, its
tasks and their splits, its verifiers, what is wrong with it, and what else serving a format's
bundle needs (`FormatExtension`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from corral.sandboxes import Resources, Sandbox, SandboxProvider, SandboxSpec
from corral.server.bundles.format import CommandVerifier, EnvConfig, Manifest, Task
from corral.server.bundles.problems import Problem, file_name
from corral.server.connection.base import EnvConnection
from corral.server.connection.stdio import EnvProcess

RESERVED_SPLIT = "all"
TRAIN_SPLIT = "train"  # the tasks in no eval split, unless evals/train.toml lists them


@dataclass(frozen=True)
class BundleEnv:
    """One env of a bundle: its folder (a Docker build context) and its env.toml; or, for a
    format whose envs are whole images (a Harbor task's), the sandbox it describes, as `spec`."""

    name: str
    folder: Path
    config: EnvConfig
    spec: SandboxSpec | None = None

    @property
    def command(self) -> tuple[str, ...]:
        """How a sandbox starts this env's process, speaking JSON-RPC on stdio."""
        if self.config.command:
            return tuple(self.config.command)
        return ("python3", "-m", "corral.env", str(self.config.entry))

    @property
    def resources(self) -> Resources:
        return Resources(**self.config.resources.model_dump())


class FormatExtension(Protocol):
    """What serving a bundle needs beyond the model, from the format that read it (corral's own
    needs nothing: its `extension` is None). Harbor's is `harbor.part.HarborPart`."""

    def wrap_provider(self, provider: SandboxProvider) -> SandboxProvider:
        """The provider the bundle's envs start in, made from the operator's (`--sandbox`)."""
        ...

    def connect(self, sandbox: Sandbox) -> EnvConnection | None:
        """The connection to the env of a sandbox the provider started, when the format answers
        it itself; None: the env is a process speaking JSON-RPC on the sandbox's stdio."""
        ...

    def where(self, root: Path, parts: tuple[str, ...]) -> str | None:
        """How a problem names the bundle's file at `parts`; None: as any bundle's (`root/parts`)."""
        ...

    def summary(self, bundle: LoadedBundle, splits: str, tools: str) -> list[str]:
        """What `corral check` and `corral serve` say of the bundle, given its splits and tools."""
        ...


@dataclass
class LoadedBundle:
    """A bundle as read from disk. `splits` maps a split name to its tasks: `all`, `train`,
    then one per eval file."""

    root: Path
    manifest: Manifest
    readme: str
    envs: dict[str, BundleEnv]
    tasks: dict[str, Task]
    splits: dict[str, list[Task]]
    verifiers: dict[str, Path]  # the Python verifiers, run outside the sandbox
    problems: list[Problem] = field(default_factory=list)
    command_verifiers: dict[str, CommandVerifier] = field(default_factory=dict)  # run inside it
    extension: FormatExtension | None = None  # what serving it needs beyond this, from its format

    def where(self, *parts: str) -> str:
        """How a problem names a file of the bundle: `gridsim/envs/gridsim` (or as its format says)."""
        named = self.extension.where(self.root, parts) if self.extension is not None else None
        return named if named is not None else file_name(self.root, self.root.joinpath(*parts))

    def serving_provider(self, provider: SandboxProvider) -> SandboxProvider:
        """The provider this bundle's envs start in, given the operator's."""
        return self.extension.wrap_provider(provider) if self.extension is not None else provider

    def connect(self, env: BundleEnv, sandbox: Sandbox) -> EnvConnection:
        """The connection to `env`, started in `sandbox`: JSON-RPC over its stdio, unless its format answers it."""
        connection = self.extension.connect(sandbox) if self.extension is not None else None
        if connection is None:
            connection = EnvProcess(sandbox, corral_runtime=env.config.entry is not None)
        return connection
