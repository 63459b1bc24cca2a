"""What an episode needs from whoever serves it, and nothing more.

An episode (`episode.py`) plays one task in one sandbox; it does not know where it is served.
`ServedBundle` (`served.py`) is the runtime a server gives its episodes; a test gives a fake
one (tests/unit/test_episode_endings.py), whose env connections reach an env in the test's
process, and whose verifiers run there too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from corral.protocol.catalog import ToolSpec
from corral.protocol.records import EpisodeRecord
from corral.protocol.rewards import RewardRule
from corral.sandboxes import Sandbox
from corral.server.bundles.format import Task
from corral.server.bundles.verifiers import CommandScore
from corral.server.connection.base import EnvConnection
from corral.server.metrics import Metrics


class EpisodeRuntime(Protocol):
    """The served bundle as one episode sees it: its limits, its sandboxes, its verifiers."""

    @property
    def name(self) -> str:
        """The bundle's name, for the episode's record."""

    @property
    def max_argument_bytes(self) -> int:
        """The largest tool call's arguments (as JSON) the episode passes to its env."""

    @property
    def max_output_chars(self) -> int:
        """The longest tool answer the episode returns whole; a longer one is cut."""

    @property
    def metrics(self) -> Metrics:
        """Where the episode counts its start and end, and times its phases."""

    @property
    def starts(self) -> asyncio.Semaphore:
        """A slot for each sandbox starting: the episode holds one from its start to its task's load."""

    @property
    def reward(self) -> RewardRule:
        """Which of the scores is the reward."""

    def offered_tools(self, task: Task) -> list[ToolSpec]:
        """The tools the agent is offered in `task` (end_turn last)."""

    async def connect(self, task: Task, labels: Mapping[str, str]) -> EnvConnection:
        """`task`'s env in a fresh sandbox, not yet initialized; SandboxError when it cannot start."""

    async def check_platform(self) -> None:
        """SandboxError when the sandboxes' provider itself fails now: the evidence that an
        ending the agent seems to have caused is the platform's."""

    def sandbox_kind(self) -> str:
        """The kind of sandbox episodes play in ("local", "docker"...), for the record."""

    def python_verifiers(self, task: Task) -> dict[str, str]:
        """`task`'s Python verifiers, {score_id: verifier}: they grade the env's report."""

    async def run_command_verifiers(self, sandbox: Sandbox, task: Task) -> dict[str, CommandScore]:
        """`task`'s command verifiers run on what the agent left in `sandbox`, by score id."""

    async def score(
        self, task: Task, report: dict[str, Any], verifiers: Mapping[str, str], *, timeout_s: float
    ) -> dict[str, float]:
        """The Python `verifiers`' scores of `report`; VerifierError when one fails, TimeoutError
        when they run past `timeout_s`."""

    def episode_ended(self, record: EpisodeRecord) -> None:
        """Count, log and record an ended episode (once per episode)."""
