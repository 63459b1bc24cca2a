"""A bundle as read from disk, whatever its format (corral's own folder, read by `bundle`, or a
folder of Harbor tasks, read by `harbor.loader`): its envs, its tasks and their splits, its
verifiers and what is wrong with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corral.sandboxes import Resources, SandboxSpec
from corral.server.bundle_format import CommandVerifier, EnvConfig, Manifest, Task
from corral.server.problems import Problem, file_name

if TYPE_CHECKING:
    from corral.server.harbor.part import HarborPart

RESERVED_SPLIT = "all"
TRAIN_SPLIT = "train"  # the tasks in no eval split, unless evals/train.toml lists them


@dataclass(frozen=True)
class BundleEnv:
    """One env of a bundle: its folder (a Docker build context) and its env.toml; or, for a
    Harbor task (corral.server.harbor), the sandbox its task.toml describes, as `spec`."""

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
    harbor: HarborPart | None = None  # a folder of Harbor tasks: what serving them needs beyond this

    def where(self, *parts: str) -> str:
        """How a problem names a file of the bundle: `gridsim/envs/gridsim` (a Harbor task's env:
        its task's folder, `tasks/fix-the-build`)."""
        if self.harbor is not None and parts[:1] == ("envs",) and len(parts) == 2:
            return f"{self.root.name}/{parts[1]}"
        return file_name(self.root, self.root.joinpath(*parts))
