"""`corral serve --workers 2`: sessions over one port spread over both workers and score; the
session limit, /health and /metrics are the host's; a worker killed mid-run costs only its own episodes
and is replaced; the host's processes all end with it, however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.client import Bundle
from corral.errors import CapacityError
from tests.conftest import FIXTURES
from tests.servers import corral_serve, free_port, kill, stop, wait_until_serving

TOYBOX = FIXTURES / "toybox"
SESSIONS = 16
DEADLINE_S = 120.0


@contextlib.contextmanager
def two_workers(*options: str) -> Iterator[tuple[str, object]]:
    port = free_port()
    server = corral_serve(TOYBOX, port, "--sandbox", "local", "--workers", "2", *options)
    try:
        url = wait_until_serving(server, port)
        wait_for(lambda: all(worker["pid"] for worker in health(url)["workers"]), "both workers to serve")
        yield url, server
    finally:
        stop(server)


def health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=30, trust_env=False).json()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {DEADLINE_S:.0f}s for {what}")
        time.sleep(0.2)


def start_episodes(environments, row) -> None:
    def start(environment) -> None:
        environment.reset(**row)
        assert environment.say(text="apple")

    with ThreadPoolExecutor(len(environments)) as threads:
        list(threads.map(start, environments))


def rewards_of(environments) -> list[float | None]:
    with ThreadPoolExecutor(len(environments)) as threads:
        return list(threads.map(lambda environment: environment.get_reward(), environments))


def descendants(pid: int) -> set[int]:
    """Every live process under `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sessions_over_one_port_reach_both_workers_score_and_share_the_hosts_limit_and_metrics():
    with two_workers("--max-concurrent-envs", str(SESSIONS)) as (url, _), Bundle(url, split="toy") as env:
        environments = [env.factory() for _ in range(SESSIONS)]
        start_episodes(environments, env.dataset[0])
        answer = health(url)
        per_worker = [worker["sessions"] for worker in answer["workers"]]
        assert (answer["sessions"], answer["max_sessions"]) == (SESSIONS, SESSIONS)
        assert sum(per_worker) == SESSIONS and min(per_worker) > 0, per_worker

        one_more = env.factory()  # each worker holds fewer than 16: the limit refusing it is the host's
        with pytest.raises(CapacityError, match=f"at its limit of {SESSIONS} sessions"):
            one_more.reset(**env.dataset[0])
        assert rewards_of(environments) == [1.0] * SESSIONS
        for _ in range(4):  # whichever worker answers, the totals are the host's: each worker played some
            assert metric(url, "corral_episodes_started_total") == SESSIONS
            assert metric(url, "corral_episodes_ended_total", status="scored") == SESSIONS
            assert metric(url, "corral_sessions_active") == SESSIONS


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


def test_a_session_created_over_http_is_refused_saying_what_to_do_instead():
    with two_workers() as (url, _):
        answer = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"},
                            timeout=30, trust_env=False).json()
        assert "several worker processes (corral serve --workers)" in answer["error"]["message"]
        assert "open a session over /ws instead" in answer["error"]["message"]


def test_a_killed_worker_costs_only_its_episodes_and_comes_back():
    with two_workers("--max-concurrent-envs", str(SESSIONS)) as (url, _), Bundle(url, split="toy") as env:
        row = env.dataset[0]
        environments = [env.factory() for _ in range(SESSIONS)]
        start_episodes(environments, row)
        workers = health(url)["workers"]
        victim = max(range(2), key=lambda index: workers[index]["sessions"])
        lost, pid = workers[victim]["sessions"], workers[victim]["pid"]
        os.kill(pid, signal.SIGKILL)  # mid-run: every episode has reset and acted, none has ended

        rewards = rewards_of(environments)
        assert rewards.count(None) == lost and rewards.count(1.0) == SESSIONS - lost, rewards
        wait_for(lambda: health(url)["workers"][victim]["pid"] not in (0, pid), "the killed worker's replacement")
        answer = health(url)  # the clients of the lost episodes may have opened new sessions since
        assert answer["sessions"] == sum(worker["sessions"] for worker in answer["workers"]) <= SESSIONS

        start_episodes(environments, row)  # all 16 at the limit of 16: the dead worker's slots were freed
        assert rewards_of(environments) == [1.0] * SESSIONS


@pytest.mark.parametrize("ending", ["SIGTERM", "SIGKILL"])
def test_no_process_of_the_host_outlives_it(ending: str):
    with two_workers() as (url, server), Bundle(url, split="toy") as env:
        environment = env.factory()
        environment.reset(**env.dataset[0])  # an episode in flight: an env process under a worker
        assert environment.say(text="apple")
        processes = descendants(server.pid)
        assert len(processes) >= 3, processes  # two workers and an env at least
        if ending == "SIGTERM":
            stop(server)
            assert server.returncode == 0
        else:
            kill(server)
        wait_for(lambda: not any(alive(pid) for pid in processes), "every process of the host to end")
