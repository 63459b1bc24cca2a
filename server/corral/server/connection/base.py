"""How an episode speaks to its env, wherever the env runs.

An env answers MCP's tool calls and, when it declares them, corral's hooks (`corral/reset`,
`corral/end_turn`, `corral/report`). Two connections implement it: `stdio.EnvProcess`, which
speaks JSON-RPC lines over the sandbox's stdio to an env process (corral's runtime or any MCP
stdio server), and `inprocess.InProcessConnection`, whose tools the server itself answers
for the sandbox (a Harbor task's terminal tools: the container has no env process). The
episode and the bundle checks hold an `EnvConnection` and never ask which.

What a failure here means for the episode (whose doing it is, what it scores, where it is
recorded) is decided in one place: corral.server.episodes.endings.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral.errors import CorralError, SandboxError
from corral.sandboxes import Sandbox


class EnvDied(SandboxError, RuntimeError):
    """The env is gone: its process closed its stream (it crashed, exited, or was killed), or
    its sandbox stopped."""


class EnvCallError(CorralError, RuntimeError):
    """The env answered a call with an error (a JSON-RPC error, for an env process)."""

    def __init__(self, method: str, error: dict[str, Any]):
        self.code = error.get("code")
        super().__init__(f"{method} failed in the env: {error.get('message', error)}")


class EnvConnection(Protocol):
    """One episode's env, started in `sandbox`. Callers bound every wait with a deadline; a
    call may raise EnvDied (the env is gone) or EnvCallError (the env refused it)."""

    @property
    def sandbox(self) -> Sandbox:
        """Where the env runs: the command verifiers run on what the agent left in it."""
        ...

    @property
    def idle(self) -> bool:
        """Whether the env has answered every call: one given up on (a deadline) may still hold it busy."""
        ...

    async def initialize(self) -> None:
        """The handshake, which also tells which of corral's hooks the env answers."""
        ...

    async def hook(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call one of corral's hooks; None, with nothing sent, when the env does not answer it
        (a tool-only env: a plain MCP server, a Harbor task)."""
        ...

    async def list_tools(self) -> list[Any]:
        """The env's tools, as MCP's `tools/list` gives them (schemas the caller validates)."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool: MCP's `tools/call` result, as the env wrote it (`episodes.env_answers` reads it)."""
        ...

    async def close(self) -> None:
        """Close the sandbox (the env with it)."""
        ...
