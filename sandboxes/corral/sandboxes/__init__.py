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

PROVIDERS = ("auto", "docker", "local")
log = logging.getLogger("corral.sandboxes")


def make_provider(name: str, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
    """The provider called `name`; `auto` is docker when an engine answers, else local.

    `instance` and `warm_pool` apply to docker: the server instance whose containers the
    reaper may remove, and how many started containers wait per env.
    """
    if name not in PROVIDERS:
        raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(PROVIDERS)}")
    if name in ("auto", "docker"):
        try:
            # The docker extra is optional: a laptop serving with local processes needs no docker package.
            from corral.sandboxes.docker_provider import DockerProvider, engine_answers
        except ImportError as error:
            if name == "docker":
                raise ValueError(f"--sandbox docker needs the docker package: pip install 'corral[docker]' ({error})") from None
        else:
            if engine_answers():
                log.info("sandbox: docker containers (hardened; one per episode)")
                return DockerProvider(instance=instance, warm_pool=warm_pool)
            if name == "docker":
                raise ValueError(
                    "--sandbox docker: no Docker engine answers (DOCKER_HOST, else /var/run/docker.sock); "
                    "start the engine, or serve with --sandbox local"
                )
    if name == "auto":
        log.info("sandbox: local processes (the embedded default; not an isolation boundary)")
    return LocalProvider()
