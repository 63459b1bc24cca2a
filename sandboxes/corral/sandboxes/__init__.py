"""Sandbox providers: where each episode's env runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from corral.errors import ConfigError, ImageError, SandboxError
from corral.sandboxes.base import (
    NETWORK_POLICIES,
    CommandResult,
    NetworkPolicy,
    Prepared,
    Progress,
    ProviderStatus,
    Resources,
    Sandbox,
    SandboxProcess,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.local.provider import LocalProvider
from corral.sandboxes.shared.pristine import starts_code  # the tests' trust base: a format checks its images' ENV

__all__ = [
    "NETWORK_POLICIES",
    "CommandResult",
    "ImageError",
    "LocalProvider",
    "NetworkPolicy",
    "Prepared",
    "ProviderStatus",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxProcess",
    "SandboxProvider",
    "SandboxSpec",
    "make_provider",
    "push_image",
    "starts_code",
]

KINDS = ("auto", "docker", "local", "modal", "kubernetes")
DOCKER_SOCKET = Path("/var/run/docker.sock")
log = logging.getLogger("corral.sandboxes")


def make_provider(
    kind: str, *, instance: str | None = None, warm_pool: int = 0, unsafe_local_shell: bool = False
) -> SandboxProvider:
    """The provider of `kind`; `auto` is docker when an engine answers, else local (never
    modal or kubernetes: a cloud that bills, or a cluster, is chosen by name).

    `instance` is the server instance whose leftovers (containers, sandboxes, local folders
    and processes) the reaper may remove, and that no other live server may hold; `warm_pool`
    is how many started sandboxes wait per env; `unsafe_local_shell` lets the local provider
    serve envs that give the agent a shell where it cannot contain them (LocalProvider). Raises ConfigError for an unknown kind, for
    docker without the docker package or an engine that answers, and for modal without the
    modal package or Modal credentials, and for kubernetes without its package, a
    kubeconfig or CORRAL_REGISTRY.
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown sandbox {kind!r}; choose one of: {', '.join(KINDS)}")
    if kind == "modal":
        return _modal(instance, warm_pool)
    if kind == "kubernetes":
        return _kubernetes(instance, warm_pool)
    if kind in ("auto", "docker") and (docker := _docker(kind, instance, warm_pool)) is not None:
        return docker
    return _local(instance, warm_pool, unsafe_local_shell)


def _modal(instance: str | None, warm_pool: int) -> SandboxProvider:
    """Modal's provider; ConfigError without the modal package or Modal's credentials."""
    try:
        # The modal extra is optional, as docker's is.
        from corral.sandboxes.modal.provider import ModalProvider
    except ImportError as error:
        raise ConfigError(f"--sandbox modal needs the modal package: pip install 'corral[modal]' ({error})") from None
    modal = ModalProvider(instance=instance, warm_pool=warm_pool)  # ConfigError without credentials
    log.info("sandbox: Modal sandboxes (one per episode, in Modal's cloud)")
    return modal


def _docker(kind: str, instance: str | None, warm_pool: int) -> SandboxProvider | None:
    """Docker's provider when its package is installed and an engine answers; else, for `auto`,
    None (local processes serve, with a warning where an engine seems to be here), and for
    `docker` ConfigError saying what is missing."""
    try:
        # The docker extra is optional: a laptop serving with local processes needs no docker package.
        from corral.sandboxes.docker.engine import engine_answers
        from corral.sandboxes.docker.provider import DockerProvider
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
        return None
    if engine_answers():
        log.info("sandbox: docker containers (hardened; one per episode)")
        return DockerProvider(instance=instance, warm_pool=warm_pool)
    if kind == "docker":
        raise ConfigError(
            "--sandbox docker: no Docker engine answers (DOCKER_HOST, else /var/run/docker.sock); "
            "start the engine, or serve with --sandbox local"
        )
    return None


def _local(instance: str | None, warm_pool: int, unsafe_local_shell: bool) -> SandboxProvider:
    """Local processes, saying whether bubblewrap isolates them."""
    provider = LocalProvider(instance=instance, warm_pool=warm_pool, unsafe_local_shell=unsafe_local_shell)
    if provider.isolated:
        log.info("sandbox: local processes, each episode in namespaces of its own (bubblewrap)")
    else:
        log.warning(
            "sandbox: local processes, NOT isolated (%s); envs that give the agent a shell are refused "
            "unless served with --unsafe-local-shell",
            provider.why_not_isolated,
        )
    return provider


def push_image(image: str, registry: str, progress: Progress) -> str:
    """Push the local env image `image` (built by `corral build`) to `registry` with this
    machine's Docker engine, under the name the kubernetes provider pulls; that name. Blocking.
    Raises ImageError (docker.push says why and the fix), ConfigError without the docker package."""
    try:
        import docker

        from corral.sandboxes.docker.push import push_image as push
    except ImportError as error:
        raise ConfigError(f"--push needs the docker package: pip install 'corral[docker]' ({error})") from None
    client = docker.from_env()
    try:
        return push(client, image, registry, progress)
    finally:
        client.close()


def _kubernetes(instance: str | None, warm_pool: int) -> SandboxProvider:
    try:
        # The kubernetes extra is optional, as docker's is.
        from corral.sandboxes.kubernetes.provider import KubernetesProvider
    except ImportError as error:
        raise ConfigError(
            f"--sandbox kubernetes needs the kubernetes_asyncio package: pip install 'corral[kubernetes]' ({error})"
        ) from None
    provider = KubernetesProvider(instance=instance, warm_pool=warm_pool)  # ConfigError without a cluster
    log.info("sandbox: Kubernetes pods (one per episode, namespace %s)", provider.cluster.settings.namespace)
    return provider


def _engine_address() -> str | None:
    """Where a Docker engine seems to be (DOCKER_HOST, else the default socket), without asking it."""
    if os.environ.get("DOCKER_HOST"):
        return f"DOCKER_HOST={os.environ['DOCKER_HOST']}"
    if DOCKER_SOCKET.exists():
        return str(DOCKER_SOCKET)
    return None
