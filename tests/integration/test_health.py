"""What /health and /metadata say about the sandboxes: the provider's kind, whether it isolates,
and how many sandboxes run now (docker's warm counts are in tests/docker/test_provider.py)."""

from __future__ import annotations

import time

import httpx

from corral.client import Bundle
from tests.conftest import FIXTURES


def get(server, path: str) -> dict:
    return httpx.get(f"{server.url}{path}", trust_env=False).json()


def test_health_counts_the_sandboxes_running_episodes(serve, no_leftover_env_processes):
    server = serve(FIXTURES / "toybox", max_concurrent_envs=3)
    assert get(server, "/health") == {
        "status": "healthy",
        "sessions": 0,
        "max_sessions": 3,
        "sandbox": {"kind": "local", "isolated": True, "live": 0, "warm": {}},  # bubblewrap runs here (CI installs it)
    }
    assert get(server, "/metadata")["sandbox"] == "local"
    with Bundle(server.url, split="toy") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        health = get(server, "/health")
        assert (health["sessions"], health["sandbox"]["live"]) == (1, 1)
        environment.say(text="apple")
        assert environment.get_reward() == 1.0
    deadline = time.monotonic() + 10  # leaving the Bundle closes its sessions, and each its sandbox
    while (health := get(server, "/health"))["sessions"] + health["sandbox"]["live"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert health["sessions"] == 0
    assert health["sandbox"] == {"kind": "local", "isolated": True, "live": 0, "warm": {}}
