"""The Kubernetes API server, as the kubernetes provider reaches it: its settings, its clients,
and the instance lease.

Settings come from the environment, checked when the provider is made so a missing one is
refused at once with its fix: the kubeconfig (`KUBECONFIG`, else ~/.kube/config, else the
service account of a server that runs in a pod), `CORRAL_REGISTRY` (where the env images
were pushed), `CORRAL_K8S_NAMESPACE` (default "default") and `CORRAL_K8S_RUNTIME_CLASS`
(optional, e.g. gvisor).

`corral serve` opens a bundle on one event loop and serves on another, and an API client's
HTTP session belongs to the loop it was made on: `Cluster` keeps one client per loop.

The lease: a coordination.k8s.io Lease `corral-<instance>` held by this run (its
holderIdentity), renewed every LEASE_BEAT_S. A second live server of the instance finds it
fresh and refuses; a killed server's goes stale after LEASE_STALE_S and a restart takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.stream import WsApiClient

from corral.errors import ConfigError, SandboxError

LEASE_BEAT_S, LEASE_STALE_S = 10.0, 45
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


@dataclass(frozen=True)
class Settings:
    """Where pods go and what they pull; see the module docstring."""

    kubeconfig: Path | None  # None: the service account of a server running in a pod
    registry: str
    namespace: str = "default"
    runtime_class: str | None = None

    @classmethod
    def from_environment(cls) -> Settings:
        """The settings, or ConfigError naming the one missing and its fix."""
        kubeconfig = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.is_file()
        if not kubeconfig.is_file() and not in_cluster:
            raise ConfigError(
                f"--sandbox kubernetes found no cluster to talk to: no kubeconfig at {kubeconfig} and not running "
                "in a pod; set KUBECONFIG to your cluster's kubeconfig (kubectl config view --raw > FILE), or run "
                "the server in the cluster with a service account"
            )
        registry = os.environ.get("CORRAL_REGISTRY", "").strip()
        if not registry:
            raise ConfigError(
                "--sandbox kubernetes needs CORRAL_REGISTRY, the registry the cluster pulls env images from (e.g. "
                "ghcr.io/you); push each env's image there as REGISTRY/corral-env/ENV:DIGEST (docs/kubernetes.md)"
            )
        return cls(
            kubeconfig if kubeconfig.is_file() else None,
            registry,
            os.environ.get("CORRAL_K8S_NAMESPACE") or "default",
            os.environ.get("CORRAL_K8S_RUNTIME_CLASS") or None,
        )


class Cluster:
    """API clients for the running event loop: `core()` for pods, `streams()` for attach."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._configuration: client.Configuration | None = None
        self._clients: dict[asyncio.AbstractEventLoop, tuple[client.ApiClient, WsApiClient]] = {}

    async def _for_loop(self) -> tuple[client.ApiClient, WsApiClient]:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            if self._configuration is None:
                configuration = client.Configuration()
                if self.settings.kubeconfig is not None:
                    await config.load_kube_config(str(self.settings.kubeconfig), client_configuration=configuration)
                else:
                    config.load_incluster_config(client_configuration=configuration)
                self._configuration = configuration
            # A client of a loop that has closed cannot be closed any more; it is only dropped.
            self._clients = {old: pair for old, pair in self._clients.items() if not old.is_closed()}
            self._clients[loop] = (client.ApiClient(self._configuration), WsApiClient(self._configuration))
        return self._clients[loop]

    async def core(self) -> client.CoreV1Api:
        return client.CoreV1Api((await self._for_loop())[0])

    async def streams(self) -> client.CoreV1Api:
        return client.CoreV1Api((await self._for_loop())[1])

    async def leases(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api((await self._for_loop())[0])

    async def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api((await self._for_loop())[0])

    async def close(self) -> None:
        """Close the running loop's clients (the only ones that still can be)."""
        pair = self._clients.pop(asyncio.get_running_loop(), None)
        if pair is not None:
            await asyncio.gather(*(api.close() for api in pair))


def failure(error: ApiException, doing: str) -> SandboxError:
    """An API error as a SandboxError that says what was being done and, for the usual causes, the fix."""
    fix = {
        401: "; the kubeconfig's credentials were refused: renew them",
        403: "; the kubeconfig's user may not do this: grant it create/get/list/delete on pods, pods/attach and pods/exec, "
        "and on leases (coordination.k8s.io) and networkpolicies (networking.k8s.io), in the namespace "
        "(CORRAL_K8S_NAMESPACE)",
    }.get(error.status, "")
    return SandboxError(f"the Kubernetes API server refused {doing}: {error.status} {error.reason}{fix}")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class InstanceLease:
    """This run's hold on its instance name in the cluster; see the module docstring."""

    def __init__(self, cluster: Cluster, instance: str, run_id: str):
        self.cluster = cluster
        self.name = f"corral-{instance}"
        self.instance = instance
        self.run_id = run_id
        self._beat: asyncio.Task | None = None

    async def take(self) -> None:
        """Hold the lease, or raise ConfigError when a live server of the instance holds it."""
        leases, namespace = await self.cluster.leases(), self.cluster.settings.namespace
        body: Any = {"metadata": {"name": self.name}, "spec": self._spec()}  # the client sends a dict as it is
        try:
            held = await leases.read_namespaced_lease(self.name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise failure(error, f"reading the lease {self.name}") from None
            held = None
        if held is not None:
            renewed = held.spec.renew_time or held.spec.acquire_time
            age = (_now() - renewed).total_seconds() if renewed else float("inf")
            if held.spec.holder_identity != self.run_id and age < (held.spec.lease_duration_seconds or LEASE_STALE_S):
                self._refuse(f"renewed {age:.0f}s ago")
            body["metadata"]["resourceVersion"] = held.metadata.resource_version  # no two restarts take it at once
        try:
            if held is None:
                await leases.create_namespaced_lease(namespace, body)
            else:
                await leases.replace_namespaced_lease(self.name, namespace, body)
        except ApiException as error:
            if error.status == 409:
                self._refuse("just taken")
            raise failure(error, f"taking the lease {self.name}") from None
        self.keep()

    def keep(self) -> None:
        """Renew the lease on the running loop from now on (a loop that closed took its renewals with it)."""
        loop = asyncio.get_running_loop()
        if self._beat is None or self._beat.done() or self._beat.get_loop() is not loop:
            self._beat = loop.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(LEASE_BEAT_S)
            with contextlib.suppress(ApiException, OSError):  # a missed beat is not yet a lost lease
                leases = await self.cluster.leases()
                await leases.patch_namespaced_lease(
                    self.name,
                    self.cluster.settings.namespace,
                    {"spec": {"renewTime": _micro(_now())}},
                    # the generated method takes it; its type stub omits it
                    _content_type="application/merge-patch+json",
                )  # type: ignore[call-arg]

    async def release(self) -> None:
        """Stop renewing and delete the lease, unless a restart has taken it over."""
        if self._beat is not None and self._beat.get_loop() is asyncio.get_running_loop():
            self._beat.cancel()
        self._beat = None
        with contextlib.suppress(ApiException):
            leases, namespace = await self.cluster.leases(), self.cluster.settings.namespace
            held = await leases.read_namespaced_lease(self.name, namespace)
            if held.spec.holder_identity == self.run_id:
                await leases.delete_namespaced_lease(self.name, namespace)

    def _spec(self) -> dict:
        now = _micro(_now())
        return {
            "holderIdentity": self.run_id,
            "leaseDurationSeconds": LEASE_STALE_S,
            "acquireTime": now,
            "renewTime": now,
        }

    def _refuse(self, when: str) -> None:
        raise ConfigError(
            f"another corral server holds the instance {self.instance!r} in the cluster (its Lease {self.name} in "
            f"namespace {self.cluster.settings.namespace} was {when}); stop that server, or serve this one with "
            "--instance OTHER_NAME (or CORRAL_INSTANCE)"
        )


def _micro(moment: datetime.datetime) -> str:
    """A MicroTime as the API server writes it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
