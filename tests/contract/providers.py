"""Each provider as the contract suite drives it: how to make one, what a killed one leaves,
and how to kill one (drop its claim on its instance, leaving its sandboxes behind)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from corral.sandboxes import SandboxProvider, SandboxSpec
from corral.sandboxes.local.procs import marked_pids

ENV = Path(__file__).resolve().parent / "env"
SPEC = SandboxSpec("contract", ENV, ("python3", "-m", "corral.env", "env:Contract"))


def unique_instance() -> str:
    return f"contract-{uuid.uuid4().hex[:8]}"


class LocalUnderTest:
    kind = "local"

    def make(self, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
        from corral.sandboxes import LocalProvider

        return LocalProvider(instance=instance, warm_pool=warm_pool)

    async def leftovers(self, instance: str) -> list[str]:
        from corral.sandboxes import LocalProvider

        root = LocalProvider(instance=instance).root
        folders = [entry.name for entry in root.iterdir() if entry.name != "lock"] if root.is_dir() else []
        return [f"process {pid}" for pid in marked_pids(f"{instance}/")] + [f"folder {name}" for name in folders]

    async def kill(self, provider) -> None:
        os.close(provider._lock)  # the lock goes with a killed server; its processes and folders stay
        provider._lock = -1


class DockerUnderTest:
    kind = "docker"

    def __init__(self, client):
        self.client = client

    def make(self, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
        from corral.sandboxes.docker.provider import DockerProvider

        return DockerProvider(instance=instance, warm_pool=warm_pool)

    async def leftovers(self, instance: str) -> list[str]:
        found = self.client.api.containers(all=True, filters={"label": [f"corral.instance={instance}"]})
        from corral.sandboxes.docker.channel import Channels

        folders = Channels(instance).root
        left = [container["Names"][0] for container in found]
        return left + ([f"socket folder {f.name}" for f in folders.iterdir()] if folders.is_dir() else [])

    async def kill(self, provider) -> None:
        await provider._lease.release()  # the lease dies with a killed server; its containers stay
        provider._lease = None


class ModalUnderTest:
    """Modal's cloud, or the fake standing in for it (fake_modal): the same calls either way."""

    def __init__(self, kind: str):
        self.kind = kind

    def make(self, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
        from corral.sandboxes.modal.provider import ModalProvider

        return ModalProvider(instance=instance, warm_pool=warm_pool, app_name=f"corral-contract-{os.getpid()}")

    async def leftovers(self, instance: str) -> list[str]:
        from corral.sandboxes.modal import provider as modal_provider

        modal = modal_provider.modal
        app = await modal.App.lookup.aio(f"corral-contract-{os.getpid()}", create_if_missing=True)
        return [
            sandbox.object_id
            async for sandbox in modal.Sandbox.list.aio(app_id=app.app_id, tags={"corral.instance": instance})
        ]

    async def kill(self, provider) -> None:
        from corral.sandboxes.modal import provider as modal_provider

        provider._lease.cancel()  # a killed server stops renewing its lease, which then goes stale
        leases = modal_provider.modal.Dict.from_name(modal_provider.LEASES)
        await leases.put.aio(
            provider.instance, {"run": provider.run_id, "beat": time.time() - modal_provider.LEASE_STALE_S - 1}
        )


class KubernetesUnderTest:
    """The kubernetes provider against a stand-in API server (fake_kubernetes), its pods local processes."""

    kind = "kubernetes-fake"
    namespace = "corral-test"
    registry = "registry.test"

    def __init__(self, cluster):
        self.cluster = cluster

    @classmethod
    def serve(cls, folder: Path, monkeypatch) -> KubernetesUnderTest:
        """Serve a stand-in whose registry holds SPEC's image, and point the provider's settings at it."""
        from corral.sandboxes.env_digest import image_tag
        from tests.contract.fake_kubernetes import FakeCluster

        cluster = FakeCluster({f"{cls.registry}/{image_tag(SPEC)}": ENV})
        cluster.start()
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(cluster.kubeconfig(cls.namespace))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("CORRAL_REGISTRY", cls.registry)
        monkeypatch.setenv("CORRAL_K8S_NAMESPACE", cls.namespace)
        return cls(cluster)

    def make(self, *, instance: str | None = None, warm_pool: int = 0) -> SandboxProvider:
        from corral.sandboxes.kubernetes.provider import KubernetesProvider

        return KubernetesProvider(instance=instance, warm_pool=warm_pool)

    async def leftovers(self, instance: str) -> list[str]:
        return [f"pod {name}" for name in self.cluster.labelled(self.namespace, **{"corral.instance": instance})]

    async def kill(self, provider) -> None:
        provider._lease._beat.cancel()  # a killed server stops renewing its lease, which then goes stale
        provider._lease = None
        self.cluster.call(_aged(self.cluster, self.namespace, f"corral-{provider.instance}"))

    def stop(self) -> None:
        unknown = self.cluster.unknown
        self.cluster.stop()
        assert unknown == [], f"the provider called routes the stand-in does not serve: {unknown}"


async def _aged(cluster, namespace: str, lease: str) -> None:
    from corral.sandboxes.kubernetes.cluster import LEASE_STALE_S

    cluster.age_lease(namespace, lease, LEASE_STALE_S + 1)
