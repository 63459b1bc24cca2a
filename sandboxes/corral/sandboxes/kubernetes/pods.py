"""What a Kubernetes pod of one env is: its manifest, its name and labels, and why it did not start.

The manifest gives the pod the docker provider's hardening where Kubernetes can say it: a
non-root user, a read-only root, no privilege escalation, every capability dropped, the
runtime's default seccomp profile, the env's `[resources]` as limits (and as requests, so the
pod is never squeezed below them), no service-account token, no restarts, a lifetime, and
size-limited memory-backed emptyDirs for /tmp and the env's writable folders. A pod a command
verifier runs in (kubernetes.execs) is the same pod with an idle command in place of the env's, no
stdin, and one more memory-backed emptyDir where the verifier's files go. Not expressed here:
a pids limit (a kubelet setting, `podPidsLimit`) and `network = "none"` (a NetworkPolicy:
kubernetes.network).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from corral.errors import SandboxError
from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.env_digest import in_registry
from corral.sandboxes.shared.bootstrap import bootstrapped

CONTAINER = "env"
SCRATCH = "/tmp"
ENV_UID = 1000  # the docker provider's ENV_USER: non-root even for an image without USER
ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": SCRATCH}
# A pod outlives a killed server by at most this long (its reaper, on restart, ends it sooner).
LIFETIME_S = 24 * 3600
# Waiting reasons of a container that will not start by itself: each is the operator's to fix.
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(value: str) -> str:
    """`value` as a Kubernetes label value: at most 63 characters of [A-Za-z0-9_.-], starting
    and ending with a letter or digit (a session id, an instance name with odd characters)."""
    return _LABEL_VALUE.sub("-", value)[:63].strip("-_.")


def pod_name(env_name: str) -> str:
    """A fresh, valid pod name for an env: `corral-<env>-<12 hex>` (DNS-1123, at most 63)."""
    stem = re.sub(r"[^a-z0-9-]", "-", env_name.lower()).strip("-")[:40] or "env"
    return f"corral-{stem}-{uuid.uuid4().hex[:12]}"


def registry_image(spec: SandboxSpec, registry: str, tag: str) -> str:
    """The image a pod of `spec` pulls: a prebuilt `image` as named, else `tag` (the env folder's
    content tag, env_digest.image_tag) under `registry`."""
    return spec.image if spec.image is not None else in_registry(registry, tag)


def refuse_unsupported(spec: SandboxSpec) -> None:
    """Raise SandboxError for what this provider does not run yet, naming the limitation."""
    if spec.writable_root:
        raise SandboxError(
            f"env {spec.env_name} runs an image whole (a Harbor task's), which --sandbox kubernetes "
            "does not run yet; serve it with --sandbox docker"
        )
    if spec.user is not None:
        raise SandboxError(
            f"env {spec.env_name} names its own user ({spec.user!r}); --sandbox kubernetes runs every "
            f"env as uid {ENV_UID} (runAsNonRoot); drop `user` or serve it with --sandbox docker"
        )


def pod_manifest(
    spec: SandboxSpec,
    image: str,
    *,
    name: str,
    labels: Mapping[str, str],
    runtime_class: str | None = None,
    idle: Sequence[str] | None = None,
    files_dir: str | None = None,
) -> dict[str, Any]:
    """The pod that runs `spec`'s env from `image`, marked with `labels`: see the module docstring.
    With `idle`, a verifier's pod: it runs `idle` instead, with an emptyDir at `files_dir`."""
    refuse_unsupported(spec)
    volumes, mounts = _volumes(spec, files_dir)
    pod_spec: dict[str, Any] = {
        "containers": [_container(spec, image, idle, mounts)],
        "volumes": volumes,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": LIFETIME_S,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # no other service's address in the env's variables
        "terminationGracePeriodSeconds": 0,  # an episode's end is final: no grace to wait out
        "securityContext": {"runAsNonRoot": True, "fsGroup": ENV_UID, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {key: label_value(value) for key, value in labels.items()}},
        "spec": pod_spec,
    }


def _volumes(spec: SandboxSpec, files_dir: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the env container's mounts of them: an emptyDir in memory for the
    scratch folder and each writable one, and a verifier's files folder."""
    writable = (SCRATCH, *spec.writable)
    volumes: list[dict[str, Any]] = [
        {"name": f"writable-{i}", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.scratch_mb}Mi"}}
        for i in range(len(writable))
    ]
    mounts = [{"name": f"writable-{i}", "mountPath": path} for i, path in enumerate(writable)]
    if files_dir is not None:  # written by corral, not the agent; in memory, so within the pod's memory limit
        volumes.append({"name": "verifier", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": "verifier", "mountPath": files_dir})
    return volumes, mounts


def _container(
    spec: SandboxSpec, image: str, idle: Sequence[str] | None, mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The env's container (or, with `idle`, a verifier's): its command, limits and hardening."""
    cpu, memory = f"{round(spec.resources.cpus * 1000)}m", f"{spec.resources.memory_mb}Mi"
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        # The env's `args`, as docker's `command`: the image's ENTRYPOINT, if any, still runs it;
        # an idle `command` replaces the ENTRYPOINT, as docker.verify's does.
        **({"command": list(idle)} if idle is not None else {"args": list(bootstrapped(spec.command) or spec.command)}),
        "stdin": idle is None,
        "stdinOnce": idle is None,  # the env reads end-of-file when the server's attach stream ends
        "tty": False,
        "imagePullPolicy": "IfNotPresent",  # a content tag never changes what it names
        "env": [{"name": key, "value": value} for key, value in {**ENVIRONMENT, **dict(spec.environment)}.items()],
        "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ENV_UID,
            "runAsGroup": ENV_UID,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }
    if spec.workdir is not None:
        container["workingDir"] = spec.workdir
    return container


def why_not_started(pod: Any) -> str | None:
    """Why a pod (a V1Pod) will not start by itself, in the cluster's words; None while it may."""
    status = pod.status
    if status is None:
        return None
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return (
                f"the cluster cannot schedule it: {condition.message}; lower the env's [resources] or give "
                "the cluster room"
            )
    for container in status.container_statuses or []:
        waiting, ended = container.state.waiting, container.state.terminated
        if waiting is not None and waiting.reason in STUCK_REASONS:
            fix = (
                "; push the image to the registry (CORRAL_REGISTRY) and let the nodes pull it"
                if "Image" in waiting.reason
                else ""
            )
            return f"{waiting.reason}: {waiting.message or 'no message'} (image {container.image}){fix}"
        if ended is not None:
            return f"its env exited with code {ended.exit_code} ({ended.reason}: {ended.message or 'no message'})"
    if status.phase in ("Failed", "Succeeded"):
        return f"it is {status.phase}: {status.reason or ''} {status.message or ''}".strip()
    return None
