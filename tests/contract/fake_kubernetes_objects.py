"""The stand-in API server's objects: a pod as the kubelet reports it, Status replies, and the
validation kube-apiserver applies to what the kubernetes provider writes (names, label values,
a pod's one container, a NetworkPolicy's spec), with the label selectors its lists take."""

from __future__ import annotations

import asyncio
import datetime
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def timestamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_reply(code: int, reason: str, message: str) -> web.Response:
    """A failure as the API server answers one: a Status object."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@dataclass
class Pod:
    body: dict[str, Any]
    process: asyncio.subprocess.Process | None = None
    attached: bool = False
    runner: asyncio.Task | None = None
    deleted: bool = False
    pid: int | None = None  # the container's PID 1, as the host sees it (fake_kubernetes_node)
    variables: dict[str, str] = field(default_factory=dict)  # its environment, an exec's too

    @property
    def container(self) -> dict[str, Any]:
        return self.body["spec"]["containers"][0]

    def set_state(self, phase: str, state: dict[str, Any], conditions: list[dict] | None = None) -> None:
        container = self.container
        self.body["status"] = {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": "running" in state,
                    "restartCount": 0,
                    "started": "running" in state,
                    "state": state,
                }
            ],
        }


def label_selector(request: web.Request) -> dict[str, str]:
    """A list's `labelSelector` of equalities (what the provider sends) as a dict."""
    return dict(term.split("=", 1) for term in request.query.get("labelSelector", "").split(",") if term)


def has_labels(body: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(body["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())


def _invalid_labels(metadata: dict[str, Any]) -> str | None:
    name = metadata.get("name", "")
    if not (_NAME.fullmatch(name) and len(name) <= 63):
        return f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 label must consist of ..."
    for key, value in metadata.get("labels", {}).items():
        if not (_LABEL_VALUE.fullmatch(value) and len(value) <= 63):
            return f"metadata.labels: Invalid value: {value!r} (label {key})"
    return None


def invalid_policy(body: dict[str, Any]) -> str | None:
    """What the API server's validation would refuse in a NetworkPolicy."""
    spec = body.get("spec", {})
    if "podSelector" not in spec:
        return "spec.podSelector: Required value"
    if not set(spec.get("policyTypes", [])) <= {"Ingress", "Egress"}:
        return f"spec.policyTypes: Unsupported value: {spec['policyTypes']}"
    return _invalid_labels(body.get("metadata", {}))


def invalid_pod(body: dict[str, Any]) -> str | None:
    """What the API server's validation would refuse in a pod (the parts the provider writes)."""
    if problem := _invalid_labels(body.get("metadata", {})):
        return problem
    containers = body.get("spec", {}).get("containers") or []
    if len(containers) != 1 or not containers[0].get("image"):
        return "spec.containers: Required value (this stand-in runs pods of one container with an image)"
    return None
