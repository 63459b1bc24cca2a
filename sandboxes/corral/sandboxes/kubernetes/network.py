"""The NetworkPolicy that takes the network from a run's pods whose env did not ask for one.

An env's `network` is `none` unless its env.toml opts into `egress` (as on docker, where
`none` is a container without a network). Each pod carries `corral.network` with its env's
choice; one policy per provider run selects the run's pods labelled `none` and allows them
no ingress and no egress. The server never needs either: it reaches the env over the API
server's attach stream, which goes through the kubelet, not the pod's network. An env that
opts in keeps the cluster's default, as a docker container on the bridge does.

The policy is labelled like the pods (`corral.instance`, `corral.run`), created before the
run's first such pod, deleted after its pods at close, and reaped with them on a restart.
It holds only where the cluster's network plugin enforces NetworkPolicy (Calico, Cilium,
...); elsewhere the API server stores it and nothing changes (docs/kubernetes.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, cast

from kubernetes_asyncio.client.rest import ApiException

from corral.sandboxes.kubernetes.cluster import Cluster, failure
from corral.sandboxes.kubernetes.pods import label_value

log = logging.getLogger("corral.sandboxes.kubernetes")
NETWORK_LABEL = "corral.network"


def policy_name(run_id: str) -> str:
    return f"corral-no-network-{run_id}"


def network_policy(run_id: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The policy of run `run_id`, labelled `labels`: no ingress or egress for its pods labelled
    `corral.network=none` (a policy listing a direction with no rule allows nothing that way)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": policy_name(run_id), "labels": {key: label_value(value) for key, value in labels.items()}},
        "spec": {
            "podSelector": {"matchLabels": {"corral.run": run_id, NETWORK_LABEL: "none"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }


async def create_policy(cluster: Cluster, policy: dict[str, Any]) -> None:
    """Create `policy`; SandboxError (with the fix) when the API server refuses it."""
    networking = await cluster.networking()
    try:
        await networking.create_namespaced_network_policy(cluster.settings.namespace, cast(Any, policy))
    except ApiException as error:
        if error.status != 409:  # already there: a retry after a timeout that had created it
            raise failure(error, f"creating the NetworkPolicy {policy['metadata']['name']}") from None


async def delete_policies(cluster: Cluster, labels: Mapping[str, str]) -> int:
    """Delete every NetworkPolicy labelled with all of `labels`; how many. SandboxError when the
    API server refuses to list them."""
    networking, namespace = await cluster.networking(), cluster.settings.namespace
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    try:
        found = await networking.list_namespaced_network_policy(namespace, label_selector=selector)
    except ApiException as error:
        raise failure(error, f"listing the NetworkPolicies labelled {selector}") from None
    await asyncio.gather(*(_delete(cluster, policy.metadata.name) for policy in found.items))
    return len(found.items)


async def _delete(cluster: Cluster, name: str) -> None:
    networking = await cluster.networking()
    try:
        await networking.delete_namespaced_network_policy(name, cluster.settings.namespace)
    except ApiException as error:
        if error.status != 404:
            log.warning("deleting the NetworkPolicy %s failed: %s %s", name, error.status, error.reason)
