"""The kubernetes provider: each episode's env in a hardened pod of a cluster.

- The cluster is the kubeconfig's (or the service account's of a server in a pod); pods go to
  `CORRAL_K8S_NAMESPACE`, optionally under `CORRAL_K8S_RUNTIME_CLASS` (kubernetes.cluster).
- Images are pulled, never built: an env folder's image is `CORRAL_REGISTRY/corral-env/<env>:<digest>`,
  the docker provider's content tag (env_digest.image_tag) under the registry, which the
  operator pushed (`corral build --push REGISTRY`, docker.push); a prebuilt `image` is pulled
  as named. A pod that cannot pull says so.
- Pods get the hardening of kubernetes.pods, and the server speaks to the env over the API server's
  attach stream (kubernetes.sandbox), never over the pod's IP. Before the run's first pod of an env
  without `network = "egress"`, a NetworkPolicy that takes their network (kubernetes.network).
- Labels: every pod carries `corral.instance`, `corral.run`, `corral.env` and
  `corral.purpose` (episode or warm), `corral.network`, and an episode's its session and
  episode. A starting server takes its instance's Lease (a live server of the same name
  refuses the second) and deletes every pod and NetworkPolicy labelled with its instance:
  what a killed server left.
- Command verifiers run in a fresh pod of the env's image and hardening, with what the agent
  left copied in over the API server's exec stream (shared.exec_verify, kubernetes.execs).
- Not in this slice: images run whole (Harbor tasks), refused with what to do instead.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Iterable, Mapping

from kubernetes_asyncio.client.rest import ApiException

from corral.errors import SandboxError
from corral.sandboxes.base import (
    Prepared,
    Progress,
    ProviderStatus,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)
from corral.sandboxes.env_digest import image_tag
from corral.sandboxes.kubernetes.cluster import Cluster, InstanceLease, Settings, failure
from corral.sandboxes.kubernetes.execs import KubeExecs
from corral.sandboxes.kubernetes.network import (
    NETWORK_LABEL,
    create_policy,
    delete_policies,
    network_policy,
)
from corral.sandboxes.kubernetes.pods import pod_manifest, pod_name, refuse_unsupported, registry_image
from corral.sandboxes.kubernetes.sandbox import KubeSandbox, delete_pod
from corral.sandboxes.shared.live_sandboxes import LiveSandboxes

log = logging.getLogger("corral.sandboxes.kubernetes")
CHECK_TIMEOUT_S = 10.0


class KubernetesProvider(SandboxProvider):
    """Starts each sandbox as a pod; see the module docstring."""

    kind = "kubernetes"
    isolated = True

    def __init__(self, *, instance: str | None = None, warm_pool: int = 0, settings: Settings | None = None):
        self.cluster = Cluster(settings or Settings.from_environment())  # ConfigError without a cluster or registry
        # Without a name (a one-off `corral check`), a unique one: it must never reap a server's.
        self.named = instance is not None
        self.instance = instance or f"{socket.gethostname()}-once-{uuid.uuid4().hex[:8]}"
        self.run_id = uuid.uuid4().hex[:12]
        self._images: dict[SandboxSpec, str] = {}
        self._live: LiveSandboxes[KubeSandbox] = LiveSandboxes(
            warm_pool, lambda spec: self._start(spec, {"corral.purpose": "warm"})
        )
        self._lease: InstanceLease | None = None
        self._policy_lock = asyncio.Lock()
        self._policy_asked = self._policy_made = False  # the run's NetworkPolicy (kubernetes.network)

    @property
    def labels(self) -> dict[str, str]:
        """The labels of every pod this run starts."""
        return {"corral.instance": self.instance, "corral.run": self.run_id}

    async def reap_leftovers(self) -> None:
        """Take the instance's Lease (ConfigError when a live server holds it), then delete every
        pod labelled with this instance."""
        if not self.named:
            return
        self._lease = InstanceLease(self.cluster, self.instance, self.run_id)
        await self._lease.take()
        instance = {"corral.instance": self.instance}
        if deleted := await self._delete_labelled(instance):
            log.info("deleted %d pod(s) a killed server of instance %s left", deleted, self.instance)
        await delete_policies(self.cluster, instance)

    async def _delete_labelled(self, labels: Mapping[str, str]) -> int:
        core = await self.cluster.core()
        selector = ",".join(f"{key}={value}" for key, value in labels.items())
        try:
            pods = await core.list_namespaced_pod(self.cluster.settings.namespace, label_selector=selector)
        except ApiException as error:
            raise failure(error, f"listing the pods labelled {selector}") from None
        await asyncio.gather(*(delete_pod(self.cluster, pod.metadata.name) for pod in pods.items))
        return len(pods.items)

    async def prepare(self, spec: SandboxSpec, progress: Progress = log.info) -> Prepared:
        """Name the image `spec`'s pods pull (nothing is built or pushed here: the registry must
        hold it already, `corral build --push`); refuse what this provider does not run yet."""
        started = time.monotonic()
        refuse_unsupported(spec)
        image = registry_image(spec, self.cluster.settings.registry, await asyncio.to_thread(image_tag, spec))
        self._images[spec] = image
        progress(
            f"env {spec.env_name}: pods pull {image} (push it there first: corral build BUNDLE --push "
            f"{self.cluster.settings.registry})"
        )
        return Prepared(spec.env_name, image, built=False, seconds=time.monotonic() - started)

    def start_pools(self, specs: Iterable[SandboxSpec]) -> None:
        """Keep `warm_pool` started pods ready for each spec (call on the serving loop)."""
        if self._lease is not None:
            self._lease.keep()  # the serving loop renews it from now on
        self._live.pools.start(specs)

    async def start(self, spec: SandboxSpec, labels: Mapping[str, str] | None = None) -> Sandbox:
        if self._lease is not None:
            self._lease.keep()
        if (sandbox := self._live.take(spec)) is not None:
            return sandbox
        return await self._start(spec, {"corral.purpose": "episode", **dict(labels or {})})

    async def _start(self, spec: SandboxSpec, labels: Mapping[str, str]) -> KubeSandbox:
        if spec not in self._images:  # never prepared (a one-off check, a test): prepare it now
            await self.prepare(spec)
        if spec.network == "none":
            await self._no_network_policy()
        marks = {**self.labels, "corral.env": spec.env_name, NETWORK_LABEL: spec.network, **labels}
        image = self._images[spec]
        manifest = pod_manifest(
            spec, image, name=pod_name(spec.env_name), labels=marks, runtime_class=self.cluster.settings.runtime_class
        )
        execs = KubeExecs(self.cluster, spec, image, marks, isolate=self._no_network_policy)
        sandbox = await KubeSandbox.create(self.cluster, spec, manifest, execs, on_close=self._closed)
        self._live.add(sandbox)
        return sandbox

    async def _no_network_policy(self) -> None:
        """Create the run's NetworkPolicy before its first pod that needs it; a start that
        failed or was cancelled leaves the next one to try again."""
        async with self._policy_lock:
            if not self._policy_made:
                self._policy_asked = True
                await create_policy(self.cluster, network_policy(self.run_id, self.labels))
                self._policy_made = True

    def _closed(self, sandbox: KubeSandbox) -> None:
        self._live.closed(sandbox, delete_pod(self.cluster, sandbox.name))

    def status(self) -> ProviderStatus:
        return self._live.status(self.kind, self.isolated)

    async def check(self) -> None:
        """The API server answers for the namespace's pods, or SandboxError says it does not."""
        try:
            core = await self.cluster.core()
            await asyncio.wait_for(core.list_namespaced_pod(self.cluster.settings.namespace, limit=1), CHECK_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - a timeout, a refused connection, an API error
            raise SandboxError(f"the Kubernetes API server did not answer ({type(error).__name__})") from None

    async def aclose(self) -> None:
        """Delete every pod of this run (the pools', the episodes', any stragglers), then its
        NetworkPolicy; let the lease go."""
        await self._live.close()
        try:
            await self._delete_labelled(self.labels)
            if self._policy_asked:
                await delete_policies(self.cluster, self.labels)
        except SandboxError as error:
            log.warning("could not delete this run's leftover pods and NetworkPolicy: %s", error)
        if self._lease is not None:
            await self._lease.release()
        await self.cluster.close()
