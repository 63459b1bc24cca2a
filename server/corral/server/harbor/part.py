"""What a bundle read from a folder of Harbor tasks carries beyond corral's own bundle model:
the tasks as Harbor wrote them, their images, the network policy and what was left out."""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.server.harbor.images import ImagePlan
from corral.server.harbor.task_files import HarborTask
from corral.server.problems import Problem


@dataclass
class HarborPart:
    """What serving a folder of Harbor tasks needs beyond a corral bundle's parts."""

    tasks: dict[str, HarborTask]  # the tasks served, by id
    images: ImagePlan
    network: str  # the operator's policy in force: "none" or "egress"
    left_out: list[Problem] = field(default_factory=list)  # each task not served, and why
    notes: list[str] = field(default_factory=list)  # what `corral check` says beside problems

    def describe(self) -> list[str]:
        """What `corral check` and `corral serve` say of the folder beside its summary line."""
        lines = [f"network: {self.network}" + ("" if self.network == "egress" else
                                                " (every task offline; --network egress gives tasks what they ask)")]
        if self.images.used:
            mapped = ", ".join(f"{name} -> {self.images.mapped[name]} ({count} task(s))"
                               for name, count in sorted(self.images.used.items()))
            lines.append(f"base images mapped: {mapped}")
        if self.left_out:
            lines.append(f"left out ({len(self.left_out)} task(s), not served):")
            lines.extend(f"  - {problem}" for problem in self.left_out)
        lines.extend(f"note: {note}" for note in self.notes)
        return lines
