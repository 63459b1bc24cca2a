"""`Bundle.local` wherever `Bundle(url)` works: a plain script, a running event loop (a Jupyter
cell's thread runs one), another thread, a spawned process; and its errors reach the caller."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import threading

import pytest

from corral.client import Bundle
from corral.errors import BundleInvalid, ServeFailed
from tests.conftest import BUNDLES

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")


def idle_day_reward() -> float | None:
    """Serve GridSim in this process, play an idle day, and stop the server."""
    with Bundle.local(BUNDLES / "gridsim", split="train", sandbox="local") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])
        environment.submit_schedule(actions=[0] * 24)
        return environment.get_reward()


def test_inside_a_running_event_loop():
    async def cell() -> float | None:  # what a notebook cell is: code run while a loop runs
        return idle_day_reward()

    assert asyncio.run(cell()) == 0.2


def test_in_another_thread():
    rewards: list[float | None] = []
    thread = threading.Thread(target=lambda: rewards.append(idle_day_reward()))
    thread.start()
    thread.join(120)
    assert rewards == [0.2]


def _reward_into(queue) -> None:
    queue.put(idle_day_reward())


def test_in_a_spawned_process():
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_reward_into, args=(queue,))
    process.start()
    try:
        assert queue.get(timeout=120) == 0.2
    finally:
        process.join(30)
    assert process.exitcode == 0


def test_a_broken_bundle_raises_bundle_invalid_inside_a_running_loop(tmp_path):
    (tmp_path / "bundle.toml").write_text('name = "broken"\n')

    async def cell() -> None:
        Bundle.local(tmp_path, sandbox="local")

    with pytest.raises(BundleInvalid, match="no env folders"):
        asyncio.run(cell())


def test_a_server_that_cannot_listen_raises_serve_failed(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr("corral.server.serving.embedded._free_port", lambda: taken.getsockname()[1])
        with pytest.raises(ServeFailed, match="did not start"):
            Bundle.local(BUNDLES / "gridsim", sandbox="local")
