"""`corral serve --workers 2`: sessions over one port spread over both workers and score; those
created over `POST /mcp` are played whichever worker each request reaches; the session limit,
/health and /metrics are the host's; a worker killed mid-run costs only its own episodes
and is replaced; the host's processes all end with it, however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openenv.core.mcp_client import MCPToolClient
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, unix_connect

from corral.client import Bundle
from corral.errors import CapacityError
from corral.sandboxes import LocalProvider
from corral.sandboxes.runtime_dirs import safe_name
from tests.conftest import FIXTURES
from tests.servers import corral_serve, free_port, instance_of, kill, stop, wait_until_serving
from tests.wire import error_of, opened, receive

TOYBOX = FIXTURES / "toybox"
SESSIONS = 16
TOKEN = "s3cret-of-the-host"
DEADLINE_S = 120.0


@contextlib.contextmanager
def two_workers(*options: str, token_file: Path | None = None) -> Iterator[tuple[str, object]]:
    port = free_port()
    token = token_file.read_text().strip() if token_file else None
    server = corral_serve(
        TOYBOX,
        port,
        "--sandbox",
        "local",
        "--workers",
        "2",
        *options,
        *(("--token-file", str(token_file)) if token_file else ()),
    )
    try:
        url = wait_until_serving(server, port, token=token)
        wait_for(lambda: all(worker["pid"] for worker in health(url, token)["workers"]), "both workers to serve")
        yield url, server
    finally:
        stop(server)


def health(url: str, token: str | None = None) -> dict:
    return httpx.get(url + "/health", headers=bearer(token), timeout=30, trust_env=False).json()


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


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
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def worker_socket(url: str, index: int) -> str:
    """Worker `index`'s private Unix socket (workers.py), to send a request to that worker alone."""
    instance = instance_of(int(url.rsplit(":", 1)[1]))
    return os.path.join(tempfile.gettempdir(), f"corral-{safe_name(instance)}-workers", f"worker-{index}.sock")


def post_on(path: str, method: str, token: str | None = None, **params: object) -> httpx.Response:
    """A JSON-RPC request on `POST /mcp` of the worker whose socket is `path`."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=60, trust_env=False) as client:
        request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return client.post("http://worker/mcp", json=request, headers=bearer(token))


def ws_on(path: str, session_id: str, token: str | None = None) -> ClientConnection:
    """A socket on `/ws?session_id=` of the worker whose socket is `path`."""
    return unix_connect(path, f"ws://worker/ws?session_id={session_id}", additional_headers=bearer(token), proxy=None)


def test_a_session_created_over_post_mcp_is_played_through_the_worker_that_does_not_hold_it(tmp_path):
    (token_file := tmp_path / "token").write_text(TOKEN)
    with two_workers(token_file=token_file) as (url, _):
        for index in (0, 1):
            holder, other = worker_socket(url, index), worker_socket(url, 1 - index)
            session_id = post_on(holder, "openenv/session/create", TOKEN).json()["result"]["session_id"]
            assert session_id.endswith(f"-w{index}")
            # The token is wanted whichever worker a request reaches (the one it reaches checks it first).
            assert post_on(other, "tools/list", session_id=session_id).status_code == 401
            assert post_on(other, "tools/list", "wrong", session_id=session_id).status_code == 403
            with ws_on(other, session_id, TOKEN) as socket:  # joined to the holder's, frame for frame
                assert opened(socket, task_id="say-apple").task_id == "say-apple"
                said = post_on(
                    other, "tools/call", TOKEN, session_id=session_id, name="say", arguments={"text": "apple"}
                )
                assert json.loads(said.json()["result"]["data"]) == {"heard": "apple"}
                ended = post_on(
                    other, "tools/call", TOKEN, session_id=session_id, name="end_turn", arguments={"response": "done"}
                )
                assert ended.json()["result"]["structuredContent"]["reward"] == 1.0
            closed = post_on(other, "openenv/session/close", TOKEN, session_id=session_id).json()
            assert closed["result"] == {"session_id": session_id, "closed": True}
        assert [worker["sessions"] for worker in health(url, TOKEN)["workers"]] == [0, 0]


def test_sessions_created_over_post_mcp_play_on_both_workers_with_openenvs_client():
    async def play_all(url: str) -> None:
        clients = [MCPToolClient(base_url=url, message_timeout_s=60) for _ in range(SESSIONS)]
        for client in clients:  # one at a time: a burst of connections is most often accepted by one worker alone
            await client.connect()  # openenv/session/create on POST /mcp, then /ws?session_id=: each on either worker
        await asyncio.gather(*(client.reset(task_id="say-apple") for client in clients))
        per_worker = [worker["sessions"] for worker in health(url)["workers"]]
        assert sum(per_worker) == SESSIONS and min(per_worker) > 0, per_worker
        assert await asyncio.gather(*(play_one(url, client) for client in clients)) == [1.0] * SESSIONS
        await asyncio.gather(*(client.close() for client in clients))

    with two_workers("--max-concurrent-envs", str(SESSIONS)) as (url, _):
        asyncio.run(play_all(url))
        assert health(url)["sessions"] == 0


async def play_one(url: str, client: MCPToolClient) -> float:
    """A tool call with the client's own connection, and the end on a new one (either worker may take it)."""
    assert json.loads(await client.call_tool("say", text="apple")) == {"heard": "apple"}
    request = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"session_id": client._production_session_id, "name": "end_turn", "arguments": {"response": "done"}},
    }
    async with httpx.AsyncClient(timeout=60, trust_env=False) as fresh:
        ended = (await fresh.post(url + "/mcp", json=request)).json()
    return ended["result"]["structuredContent"]["reward"]


def test_a_session_whose_worker_was_killed_is_unknown_at_once_on_the_other_and_its_replacement_serves():
    with two_workers() as (url, _):
        holder, other = worker_socket(url, 0), worker_socket(url, 1)
        session_id = post_on(holder, "openenv/session/create").json()["result"]["session_id"]
        with ws_on(other, session_id) as socket:
            opened(socket, task_id="say-apple")
            assert "result" in say_on(other, session_id)
            pid = health(url)["workers"][0]["pid"]
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ConnectionClosed) as closed:  # the client's socket closes, saying why
                socket.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        assert say_on(other, session_id)["error"]["message"] == f"Unknown session_id: {session_id}"
        with ws_on(other, session_id) as late:
            assert error_of(receive(late, timeout_s=30)).message.startswith(f"Unknown session_id: {session_id}")

        wait_for(lambda: health(url)["workers"][0]["pid"] not in (0, pid), "the killed worker's replacement")
        session_id = post_on(holder, "openenv/session/create").json()["result"]["session_id"]
        with ws_on(other, session_id) as socket:
            opened(socket, task_id="say-apple")
            assert json.loads(say_on(other, session_id)["result"]["data"]) == {"heard": "apple"}


def say_on(path: str, session_id: str) -> dict:
    return post_on(path, "tools/call", session_id=session_id, name="say", arguments={"text": "apple"}).json()


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


def test_a_host_restarted_with_fewer_workers_reaps_what_its_dropped_workers_left():
    instance = f"dropped-{os.getpid()}"
    with two_workers("--instance", instance) as (url, server), Bundle(url, split="toy") as env:
        environments = []
        # The kernel hands each connection to whichever worker accepts first: one at a time, until
        # both hold episodes (a worker that never accepted one in 16 would be a fault).
        while len(environments) < 16 and not all(worker["sessions"] for worker in health(url)["workers"]):
            environments.append(env.factory())
            environments[-1].reset(**env.dataset[0])
        workers = health(url)["workers"]
        assert all(worker["sessions"] for worker in workers), workers
        for worker in workers:  # the whole host dies at once, as in a power cut: no worker tears down
            os.kill(worker["pid"], signal.SIGSTOP)
        kill(server)
        for worker in workers:
            os.kill(worker["pid"], signal.SIGKILL)
    dropped = LocalProvider(instance=f"{instance}-w1").root
    assert [entry for entry in dropped.iterdir() if entry.name != "lock"], "worker 1's episodes left nothing to reap"

    port = free_port()
    server = corral_serve(TOYBOX, port, "--sandbox", "local", "--instance", instance)  # one worker now
    try:
        wait_until_serving(server, port)
    finally:
        stop(server)

    assert not dropped.exists() or [entry.name for entry in dropped.iterdir()] in ([], ["lock"])
