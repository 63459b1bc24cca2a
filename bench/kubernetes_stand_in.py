"""The kubernetes provider's own overhead, on the stand-in API server: a pod's start and one
`echo` tool call over the attach stream, beside the local provider's start and call.

    python bench/kubernetes_stand_in.py --runs 20

Run from the repository root (the stand-in lives in tests/contract). The stand-in's pods
are local processes, so the difference is the provider's control plane (create, poll until
Running, attach) and the WebSocket hop per line; a real cluster adds scheduling, the image
pull and the kubelet's container start, none of which this measures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral.sandboxes import LocalProvider, SandboxProvider
from tests.contract.providers import SPEC, KubernetesUnderTest
from tests.contract.test_provider_contract import call, tool


class Environment:
    """monkeypatch's setenv, for a script."""

    def setenv(self, name: str, value: str) -> None:
        import os

        os.environ[name] = value


async def timings(provider: SandboxProvider, runs: int) -> tuple[list[float], list[float]]:
    starts, calls = [], []
    try:
        await provider.prepare(SPEC)
        for _ in range(runs):
            began = time.perf_counter()
            sandbox = await provider.start(SPEC)
            await call(sandbox, "initialize", {"protocolVersion": "2025-06-18"})
            starts.append(time.perf_counter() - began)
            for _ in range(20):
                began = time.perf_counter()
                assert await tool(sandbox, "echo", text="hi") == "hi"
                calls.append(time.perf_counter() - began)
            await sandbox.close()
    finally:
        await provider.aclose()
    return starts, calls


def report(name: str, starts: list[float], calls: list[float]) -> None:
    print(
        f"{name:>16}: start+initialize p50 {statistics.median(starts) * 1e3:7.1f} ms, "
        f"echo call p50 {statistics.median(calls) * 1e6:7.0f} us (p95 "
        f"{statistics.quantiles(calls, n=20)[-1] * 1e6:.0f} us)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    report("local", *asyncio.run(timings(LocalProvider(), runs)))
    stand_in = KubernetesUnderTest.serve(Path(tempfile.mkdtemp()), Environment())
    try:
        from corral.sandboxes.kubernetes.provider import KubernetesProvider

        report("kubernetes-fake", *asyncio.run(timings(KubernetesProvider(), runs)))
    finally:
        stand_in.stop()


if __name__ == "__main__":
    main()
