"""Command verifiers on the kubernetes provider: scored on what the agent left, in a fresh pod
of the same image and hardening, against the stand-in API server (tests/contract/fake_kubernetes.py,
whose pods have namespaces and emptyDirs of their own). The agent's doings are commands run in
its pod over the exec stream, as a shell tool of its env would run them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import pytest

from corral.errors import SandboxError
from corral.sandboxes.kubernetes.execs import exit_code, run_in_pod
from corral.sandboxes.kubernetes.provider import KubernetesProvider
from corral.sandboxes.kubernetes.sandbox import KubeSandbox, delete_pod
from corral.sandboxes.shared.exec_verify import STDERR, STDOUT
from tests.contract.providers import SPEC, KubernetesUnderTest

pytestmark = pytest.mark.fast
NAMESPACE = "corral-test"
WITH_DATA = dataclasses.replace(SPEC, writable=("/data",), scratch_mb=1)
# What the agent leaves: an answer in its writable folder, a file in its scratch /tmp (not
# copied), and a process still running.
AGENT = "echo 42 > /data/answer.txt; echo mine > /tmp/outside.txt; sleep 4242 >/dev/null 2>&1 &"
LEFTOVER = 'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline; echo; done 2>/dev/null | grep -c "^sleep 4242"'


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    under = KubernetesUnderTest.serve(tmp_path, monkeypatch)
    yield under.cluster
    under.stop()


@contextlib.asynccontextmanager
async def agent_pod(agent: str = AGENT) -> AsyncIterator[tuple[KubernetesProvider, KubeSandbox]]:
    provider = KubernetesProvider()
    try:
        sandbox = await provider.start(WITH_DATA)
        assert isinstance(sandbox, KubeSandbox)
        await shell(provider, sandbox.name, agent)
        yield provider, sandbox
    finally:
        await provider.aclose()


async def shell(provider: KubernetesProvider, pod: str, script: str) -> tuple[int, str]:
    said = bytearray()
    code = await run_in_pod(provider.cluster, pod, ["/bin/sh", "-c", script], lambda _, chunk: said.extend(chunk), None)
    return code, said.decode()


def verifiers(cluster) -> list[str]:
    return cluster.labelled(NAMESPACE, **{"corral.purpose": "verify"})


@pytest.mark.bwrap
def test_a_verifier_scores_what_the_agent_left_in_a_fresh_pod_and_the_pod_goes(cluster):
    check = (
        'test "$(cat /data/answer.txt)" = "$(cat $1/expected.txt)" && echo right || { echo wrong; exit 1; }; '
        f"test -e /tmp/outside.txt && echo saw-scratch; echo leftovers=$({LEFTOVER})"
    )

    async def run() -> None:
        async with agent_pod() as (provider, sandbox):
            assert (await shell(provider, sandbox.name, LEFTOVER))[1].strip() == "1"
            created = cluster.created
            right = await sandbox.verify(
                {"expected.txt": b"42\n", "check.sh": check.encode()},
                lambda d: ["/bin/sh", f"{d}/check.sh", d],
                timeout_s=30,
            )
            assert (right.exit_code, right.output.split()) == (0, ["right", "leftovers=0"])
            wrong = await sandbox.verify(
                {"expected.txt": b"41\n", "check.sh": check.encode()},
                lambda d: ["/bin/sh", f"{d}/check.sh", d],
                timeout_s=30,
            )
            assert (wrong.exit_code, wrong.output.split()) == (1, ["wrong"])
            assert cluster.created == created + 2 and verifiers(cluster) == []  # a pod each, deleted after
            # The agent's own pod: its leftover process was killed, its answer is still there.
            assert (await shell(provider, sandbox.name, f"cat /data/answer.txt; {LEFTOVER}"))[1] == "42\n0\n"

    asyncio.run(run())


@pytest.mark.bwrap
def test_the_verifiers_pod_has_the_agents_hardening_an_idle_command_and_no_network(cluster):
    async def run() -> None:
        async with agent_pod() as (provider, sandbox):
            verifying = asyncio.create_task(sandbox.verify({}, lambda d: ["/bin/sleep", "2"], timeout_s=30))
            async with asyncio.timeout(30):
                while not verifiers(cluster):
                    await asyncio.sleep(0.02)
            (name,) = verifiers(cluster)
            fresh, agent = cluster.pods[(NAMESPACE, name)].body, cluster.pods[(NAMESPACE, sandbox.name)].body
            assert (await verifying).exit_code == 0
            policies = [policy["spec"]["podSelector"]["matchLabels"] for policy in cluster.policies.values()]
        (container,), (agents,) = fresh["spec"]["containers"], agent["spec"]["containers"]
        assert container["securityContext"] == agents["securityContext"] and container["image"] == agents["image"]
        assert container["command"][0] == "/bin/sleep" and "args" not in container and container["stdin"] is False
        labels = fresh["metadata"]["labels"]
        assert labels["corral.run"] == provider.run_id and labels["corral.network"] == "none"
        assert {"corral.run": provider.run_id, "corral.network": "none"} in policies  # the run's NetworkPolicy holds it
        (files,) = [m for m in container["volumeMounts"] if m["name"] == "verifier"]
        assert files["mountPath"].startswith("/verifier-")

    asyncio.run(run())


@pytest.mark.bwrap
def test_the_verifiers_files_get_a_new_name_each_time_and_a_link_to_them_stops_it(cluster):
    async def run(agent: str) -> list[str]:
        async with agent_pod(agent) as (_, sandbox):
            return [(await sandbox.verify({}, lambda d: ["/bin/echo", d], timeout_s=30)).output for _ in range(2)]

    first, second = asyncio.run(run("true"))
    assert first.startswith("/verifier-") and second.startswith("/verifier-") and first != second
    (forged, _) = asyncio.run(run("ln -s /proc/self/fd/3 /data/answer.txt"))
    assert "links the agent left lead where" in forged and "/data/answer.txt -> /proc/self/fd/3" in forged


@pytest.mark.bwrap
def test_the_agents_folders_past_their_bound_fail_the_verifier(cluster):
    async def run() -> None:
        async with agent_pod("head -c 3000000 /dev/zero > /data/big") as (_, sandbox):
            result = await sandbox.verify({}, lambda d: ["/bin/true"], timeout_s=30)
            assert result.exit_code == 1 and "came to more than 2 MB as an archive" in result.output
            assert verifiers(cluster) == []

    asyncio.run(run())


@pytest.mark.bwrap
def test_the_verifiers_pod_goes_past_the_deadline_and_when_the_platform_fails(cluster):
    async def run() -> None:
        async with agent_pod() as (provider, sandbox):
            slow = await sandbox.verify({}, lambda d: ["/bin/sh", "-c", "echo started; sleep 60"], timeout_s=2)
            assert (slow.exit_code, slow.output) == (None, "started\n") and verifiers(cluster) == []
            await delete_pod(provider.cluster, sandbox.name)  # the agent's pod gone: its folders cannot be copied
            with pytest.raises(SandboxError, match="verifying env contract on Kubernetes failed"):
                await sandbox.verify({}, lambda d: ["/bin/true"], timeout_s=30)
            assert verifiers(cluster) == []

    asyncio.run(run())


def test_an_exec_streams_status_is_read_as_the_api_server_writes_it():
    assert exit_code(b'{"metadata":{},"status":"Success"}', "x") == 0
    failed = (
        b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit 3",'
        b'"reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    assert exit_code(failed, "x") == 3
    internal = b'{"status":"Failure","reason":"InternalError","message":"executable file not found in $PATH"}'
    with pytest.raises(SandboxError, match="executable file not found"):
        exit_code(internal, "x")
    with pytest.raises(SandboxError, match="ended without saying how the command ended"):
        exit_code(b"", "x")
    assert (STDOUT, STDERR) == (1, 2)  # the channels' numbers on the wire
