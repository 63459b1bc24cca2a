"""Sandbox providers: where each episode's env runs."""

from __future__ import annotations

import logging

from corral.sandboxes.base import (
    CommandResult,
    Resources,
    Sandbox,
    SandboxError,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.local import LocalProvider

__all__ = [
    "CommandResult",
    "LocalProvider",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxProvider",
    "SandboxSpec",
    "make_provider",
]

PROVIDERS = ("auto", "local")
log = logging.getLogger("corral.sandboxes")


def make_provider(name: str) -> SandboxProvider:
    """The provider called `name`; `auto` is the best one this machine has."""
    if name in ("auto", "local"):
        if name == "auto":
            log.info("sandbox: local processes (the embedded default; not an isolation boundary)")
        return LocalProvider()
    raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(PROVIDERS)}")
