"""bundle.toml beside a folder of Harbor tasks: what Harbor has no word for. Optional; every
key has a default.

    name = "my-tasks"                    # default: the folder's name
    description = "..."
    system_prompt = "..."                # default: DEFAULT_SYSTEM_PROMPT
    tools = ["bash", "write_file"]       # the tools offered (default: all four)
    network = "none"                     # or "egress": tasks that ask for a network get one
    exclude = ["flaky-task"]             # tasks left out of the bundle
    split_by = "difficulty"              # a [metadata] key: one split per value
    [splits]                             # and/or splits by name: split -> task ids
    eval = ["task-a", "task-b"]
    [base_images]                        # FROM image -> a local image, or a folder to build
    "ubuntu:24.04" = "debian:bookworm-slim"
    [resources]                          # where task.toml says nothing
    cpus = 1.0
    memory_mb = 2048
    pids = 1024
    [serve]                              # as a corral bundle's [serve]
    reward = "reward"
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.sandboxes import NetworkPolicy
from corral.server.bundles.format import NAME_PATTERN, ServeDefaults

DEFAULT_SYSTEM_PROMPT = """\
You are working in a Linux container to complete the task you are given. You have a shell and \
file tools there: bash(command, timeout_s) runs a command in the task's working folder and \
shows its output and exit status; read_file(path), write_file(path, content) and \
replace_in_file(path, old, new) read and edit files. When the task is done, call end_turn. \
After your turn, hidden tests check what you left in the container."""
TOOL_NAMES = ("bash", "read_file", "write_file", "replace_in_file")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HarborResources(_Strict):
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=2048, ge=16)
    pids: int = Field(default=1024, ge=8)
    # What an agent may write to its container's root, where a task's storage_mb says nothing:
    # the env host's disk is shared by every episode (docker/whole_image/disk.py).
    disk_mb: int = Field(default=10240, ge=16)


class HarborManifest(_Strict):
    """bundle.toml of a folder of Harbor tasks."""

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    description: str = ""
    version: str = "0.0.0"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: list[Literal["bash", "read_file", "write_file", "replace_in_file"]] | None = Field(
        default=None, min_length=1
    )
    network: NetworkPolicy = "none"
    exclude: list[str] = Field(default_factory=list)
    split_by: str | None = None
    splits: dict[str, list[str]] = Field(default_factory=dict)
    base_images: dict[str, Any] = Field(default_factory=dict)
    resources: HarborResources = Field(default_factory=HarborResources)
    failure_score: float = 0.0
    serve: ServeDefaults = Field(default_factory=ServeDefaults)
