"""Sandbox providers: where each episode's env runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from corral.errors import ConfigError, ImageError, SandboxError
from corral.sandboxes.base import (
    CommandResult,
    Prepared,
    ProviderStatus,
    Resources,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.local import LocalProvider

__all__ = [
    "CommandResult",
    "ImageError",
    "LocalProvider",
    "Prepared",
    "ProviderStatus",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxProvider",
    "SandboxSpec",
    "make_provider",
]

KINDS = ("auto", "docker", "local")
DOCKER_SOCKET = Path("/var/run/docker.sock")
log = logging.getLogger("corral.sandboxes")


def make_provider(kind: str, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
    """The provider of `kind`; `auto` is docker when an engine answers, else local.

    `instance` is the server instance whose leftovers (containers, local folders and
    processes) the reaper may remove, and that no other live server may hold; `warm_pool`
    applies to docker: how many started containers wait per env. Raises ConfigError for an
    unknown kind, and for docker without the docker package or an engine that answers.
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown sandbox {kind!r}; choose one of: {', '.join(KINDS)}")
    if kind in ("auto", "docker"):
        try:
            # The docker extra is optional: a laptop serving with local processes needs no docker package.
            from corral.sandboxes.docker_engine import engine_answers
            from corral.sandboxes.docker_provider import DockerProvider
        except ImportError as error:
            if kind == "docker":
                raise ConfigError(
                    f"--sandbox docker needs the docker package: pip install 'corral[docker]' ({error})"
                ) from None
            if engine := _engine_address():
                log.warning(
                    "sandbox: a Docker engine seems to be here (%s) but the docker package is not installed, "
                    "so episodes run as local processes; pip install 'corral[docker]' to run them in containers",
                    engine,
                )
        else:
            if engine_answers():
                log.info("sandbox: docker containers (hardened; one per episode)")
                return DockerProvider(instance=instance, warm_pool=warm_pool)
            if kind == "docker":
                raise ConfigError(
                    "--sandbox docker: no Docker engine answers (DOCKER_HOST, else /var/run/docker.sock); "
                    "start the engine, or serve with --sandbox local"
                )
        log.info("sandbox: local processes (the embedded default; not an isolation boundary)")
    else:
        log.info("sandbox: local processes (not an isolation boundary)")
    if warm_pool:
        log.warning("a warm pool of %d is for docker sandboxes; local processes start at each reset", warm_pool)
    return LocalProvider(instance=instance)


def _engine_address() -> str | None:
    """Where a Docker engine seems to be (DOCKER_HOST, else the default socket), without asking it."""
    if os.environ.get("DOCKER_HOST"):
        return f"DOCKER_HOST={os.environ['DOCKER_HOST']}"
    if DOCKER_SOCKET.exists():
        return str(DOCKER_SOCKET)
    return None
