"""What a bundle read from a folder of Harbor tasks carries beyond corral's own bundle model
(its `FormatExtension`): the tasks as Harbor wrote them, their images, the network policy and
what was left out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corral.sandboxes import Sandbox, SandboxProvider
from corral.server.bundles.problems import Problem
from corral.server.connection.base import EnvConnection
from corral.server.harbor.hosted import HarborProvider, connect
from corral.server.harbor.images import ImagePlan
from corral.server.harbor.task_files import HarborTask

if TYPE_CHECKING:
    from corral.server.bundles.model import LoadedBundle


@dataclass
class HarborPart:
    """What serving a folder of Harbor tasks needs beyond a corral bundle's parts."""

    tasks: dict[str, HarborTask]  # the tasks served, by id
    images: ImagePlan
    network: str  # the operator's policy in force: "none" or "egress"
    left_out: list[Problem] = field(default_factory=list)  # each task not served, and why
    notes: list[str] = field(default_factory=list)  # what `corral check` says beside problems

    def wrap_provider(self, provider: SandboxProvider) -> SandboxProvider:
        """Its tasks' images and tools are the Harbor provider's to make."""
        return HarborProvider(provider, self.images)

    def connect(self, sandbox: Sandbox) -> EnvConnection:
        """A task's tools are answered in the server (hosted.py), for its container."""
        return connect(sandbox)

    def where(self, root: Path, parts: tuple[str, ...]) -> str | None:
        """A task's env is its task's folder: `tasks/fix-the-build`, not `tasks/envs/fix-the-build`."""
        return f"{root.name}/{parts[1]}" if parts[:1] == ("envs",) and len(parts) == 2 else None

    def summary(self, bundle: LoadedBundle, splits: str, tools: str) -> list[str]:
        """An env per task, so no list of envs (their names are the tasks'); then `describe`."""
        return [
            f"{bundle.manifest.name}: {len(bundle.tasks)} Harbor tasks; splits {splits}; tools {tools}",
            *self.describe(),
        ]

    def describe(self) -> list[str]:
        """What `corral check` and `corral serve` say of the folder beside its summary line."""
        lines = [
            f"network: {self.network}"
            + ("" if self.network == "egress" else " (every task offline; --network egress gives tasks what they ask)")
        ]
        if self.images.used:
            mapped = ", ".join(
                f"{name} -> {self.images.mapped[name]} ({count} task(s))"
                for name, count in sorted(self.images.used.items())
            )
            lines.append(f"base images mapped: {mapped}")
        if self.left_out:
            lines.append(f"left out ({len(self.left_out)} task(s), not served):")
            lines.extend(f"  - {problem}" for problem in self.left_out)
        lines.extend(f"note: {note}" for note in self.notes)
        return lines


def harbor_part(bundle: LoadedBundle) -> HarborPart | None:
    """The Harbor part of a bundle read from Harbor tasks; None for a bundle of another format."""
    return bundle.extension if isinstance(bundle.extension, HarborPart) else None
