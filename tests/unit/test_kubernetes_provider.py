"""The kubernetes provider: the pods it asks for, what it refuses and why, and what it leaves.

The pod manifests and the NetworkPolicy are checked as data; starts, refusals and cleanup run
against the stand-in API server (tests/contract/fake_kubernetes.py), whose pods are local
processes and which stores NetworkPolicies but, like a cluster without an enforcing network
plugin, does not apply them.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from corral.errors import ConfigError, SandboxError
from corral.sandboxes import Resources
from corral.sandboxes.kubernetes import cluster as kube_cluster
from corral.sandboxes.kubernetes.network import network_policy
from corral.sandboxes.kubernetes.pods import label_value, pod_manifest
from corral.sandboxes.kubernetes.provider import KubernetesProvider
from tests.contract.providers import SPEC, KubernetesUnderTest

IMAGE = "registry.test/corral-env/contract:0123"
NAMESPACE = "corral-test"
EGRESS = dataclasses.replace(SPEC, network="egress")


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    under = KubernetesUnderTest.serve(tmp_path, monkeypatch)
    yield under.cluster
    under.stop()


def test_a_pod_gets_the_docker_hardening_that_kubernetes_can_express():
    spec = dataclasses.replace(SPEC, writable=("/data",), scratch_mb=32, resources=Resources(cpus=0.5, memory_mb=256))
    pod = pod_manifest(spec, IMAGE, name="corral-contract-1", labels={"corral.instance": "i"}, runtime_class="gvisor")
    body = pod["spec"]
    (container,) = body["containers"]
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert (container["stdin"], container["stdinOnce"], container["tty"]) == (True, True, False)
    assert container["args"][:2] == ["python3", "-c"]  # corral's SDK comes over stdin (bootstrap)
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp", "/data"}
    assert all(v["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Mi"} for v in body["volumes"])
    assert body["automountServiceAccountToken"] is False and body["restartPolicy"] == "Never"
    assert body["activeDeadlineSeconds"] > 0 and body["runtimeClassName"] == "gvisor"
    assert body["securityContext"]["runAsNonRoot"] is True


def test_labels_are_made_valid_label_values():
    pod = pod_manifest(SPEC, IMAGE, name="p", labels={"corral.session": "host:8000/s 1", "corral.env": "x" * 80})
    labels = pod["metadata"]["labels"]
    assert labels["corral.session"] == "host-8000-s-1" and len(labels["corral.env"]) == 63
    assert label_value("-odd-") == "odd"


def test_what_this_slice_does_not_run_is_refused_naming_the_way_out(cluster):
    whole = dataclasses.replace(SPEC, writable_root=True)

    async def check() -> None:
        provider = KubernetesProvider()
        try:
            with pytest.raises(SandboxError, match="does not run yet; serve it with --sandbox docker"):
                await provider.prepare(whole)
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_no_kubeconfig_and_no_registry_are_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("CORRAL_REGISTRY", "registry.test")
    with pytest.raises(ConfigError, match=r"no kubeconfig at .*missing.*set KUBECONFIG"):
        KubernetesProvider()
    (tmp_path / "missing").write_text("{}")
    monkeypatch.delenv("CORRAL_REGISTRY")
    with pytest.raises(ConfigError, match="needs CORRAL_REGISTRY"):
        KubernetesProvider()


def test_an_image_the_registry_lacks_says_so_and_leaves_no_pod(cluster):
    absent = dataclasses.replace(SPEC, image="registry.test/nowhere:1")

    async def check() -> None:
        provider = KubernetesProvider()
        try:
            with pytest.raises(SandboxError, match=r"did not start: (ErrImagePull|ImagePullBackOff).*nowhere:1.*push"):
                await provider.start(absent)
            assert cluster.labelled("corral-test", **{"corral.run": provider.run_id}) == []
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_pod_too_large_for_the_cluster_says_why_and_leaves_no_pod(cluster):
    huge = dataclasses.replace(SPEC, resources=Resources(memory_mb=128 * 1024))

    async def check() -> None:
        provider = KubernetesProvider()
        try:
            with pytest.raises(
                SandboxError, match="cannot schedule it: 0/1 nodes are available: 1 Insufficient memory"
            ):
                await provider.start(huge)
            assert cluster.labelled("corral-test", **{"corral.run": provider.run_id}) == []
        finally:
            await provider.aclose()

    asyncio.run(check())


@pytest.mark.bwrap
def test_each_pod_goes_when_its_episode_ends_and_the_rest_when_the_provider_closes(cluster):
    async def check() -> None:
        provider = KubernetesProvider(instance="unit-cleanup")
        await provider.reap_leftovers()
        mine = {"corral.run": provider.run_id}
        first = await provider.start(SPEC, {"corral.session": "s1", "corral.episode": "e1"})
        second = await provider.start(SPEC)
        (name,) = cluster.labelled("corral-test", **{**mine, "corral.episode": "e1"})
        assert name == first.name and len(cluster.labelled("corral-test", **mine)) == 2
        await first.close()
        await provider._live.settled()
        assert cluster.labelled("corral-test", **mine) == [second.name]
        await provider.aclose()
        assert cluster.labelled("corral-test", **mine) == []
        assert cluster.leases == {}  # the lease went with it

    asyncio.run(check())


def test_a_held_lease_is_renewed(cluster, monkeypatch):
    monkeypatch.setattr(kube_cluster, "LEASE_BEAT_S", 0.05)

    async def check() -> None:
        provider = KubernetesProvider(instance="unit-renew")
        await provider.reap_leftovers()
        cluster.age_lease("corral-test", "corral-unit-renew", 30)
        aged = cluster.leases[("corral-test", "corral-unit-renew")]["spec"]["renewTime"]
        await asyncio.sleep(0.3)
        renewed = cluster.leases[("corral-test", "corral-unit-renew")]["spec"]["renewTime"]
        await provider.aclose()
        assert renewed > aged

    asyncio.run(check())


def test_the_policy_allows_no_traffic_either_way_to_the_runs_pods_without_network():
    policy = network_policy("0123abcd", {"corral.instance": "host:8000", "corral.run": "0123abcd"})
    assert policy["kind"] == "NetworkPolicy" and policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"] == {
        "name": "corral-no-network-0123abcd",
        "labels": {"corral.instance": "host-8000", "corral.run": "0123abcd"},
    }
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"corral.run": "0123abcd", "corral.network": "none"}},
        "policyTypes": ["Ingress", "Egress"],  # both listed, neither with a rule: nothing in, nothing out
        "ingress": [],
        "egress": [],
    }


@pytest.mark.bwrap
def test_a_pod_without_network_is_isolated_and_one_that_opts_in_is_not(cluster):
    async def check() -> None:
        provider = KubernetesProvider()
        try:
            offline, online = await provider.start(SPEC), await provider.start(EGRESS)
            (policy,) = cluster.policies_of(NAMESPACE, offline.name)
            assert (policy["spec"]["policyTypes"], policy["spec"]["ingress"], policy["spec"]["egress"]) == (
                ["Ingress", "Egress"],
                [],
                [],
            )
            assert cluster.policies_of(NAMESPACE, online.name) == []
            assert len(cluster.policies) == 1  # one per run, however many pods
            await provider.start(SPEC)
            assert len(cluster.policies) == 1
        finally:
            await provider.aclose()
        assert cluster.policies == {}  # gone with the run's pods

    asyncio.run(check())


@pytest.mark.bwrap
def test_a_run_whose_envs_all_opt_in_makes_no_policy(cluster):
    async def check() -> None:
        provider = KubernetesProvider()
        try:
            await provider.start(EGRESS)
            assert cluster.policies == {}
        finally:
            await provider.aclose()

    asyncio.run(check())


def test_a_killed_servers_policy_is_reaped_by_its_restart(cluster):
    killed = network_policy("deadbeef0000", {"corral.instance": "unit-net", "corral.run": "deadbeef0000"})
    killed["metadata"]["namespace"] = NAMESPACE
    cluster.policies[(NAMESPACE, killed["metadata"]["name"])] = killed
    other = network_policy("cafe00000000", {"corral.instance": "someone-else", "corral.run": "cafe00000000"})
    cluster.policies[(NAMESPACE, other["metadata"]["name"])] = other

    async def check() -> None:
        provider = KubernetesProvider(instance="unit-net")
        try:
            await provider.reap_leftovers()
            assert list(cluster.policies) == [(NAMESPACE, "corral-no-network-cafe00000000")]  # another's stays
        finally:
            await provider.aclose()

    asyncio.run(check())
