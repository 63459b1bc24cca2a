"""Python verifiers in worker processes: one that hangs past its episode's deadline is killed
with its worker, so it costs that episode only, never a thread or a slot of the server.

Each worker imports the bundle's verifiers once and then scores episodes one at a time; the
server waits for its answer on the event loop (no thread). A worker killed at a deadline, or
one that died, is replaced by a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from corral.errors import VerifierError

SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the server's state
STUCK_AFTER_S = 1.0  # a verification takes milliseconds: one running this long may be hung
BOOT_WAIT_S = 60.0  # how long a starting server waits for its workers to import the verifiers


class _Worker:
    def __init__(self, paths: Mapping[str, Path]):
        self.conn, child_conn = SPAWN.Pipe()
        self.process: BaseProcess = SPAWN.Process(
            target=_serve, args=(child_conn, dict(paths)), name="corral-verifier", daemon=True
        )
        self.process.start()
        child_conn.close()
        self.booted = False
        self.busy_since: float | None = None  # when its current verification started

    @property
    def stuck(self) -> bool:
        return self.busy_since is not None and time.monotonic() - self.busy_since >= STUCK_AFTER_S

    async def boot(self) -> None:
        """Wait until the worker's interpreter has started and loaded the verifiers (once)."""
        if not self.booted:
            await self._answer()
            self.booted = True

    async def score(self, request: tuple[Any, ...]) -> tuple[str, Any]:
        self.busy_since = time.monotonic()
        self.conn.send(request)
        answer = await self._answer()
        self.busy_since = None
        return answer

    async def _answer(self) -> Any:
        """The worker's next message, waited for on the event loop (no thread)."""
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not answered.done():
                answered.set_result(None)

        loop.add_reader(self.conn.fileno(), wake)
        try:
            await answered
        finally:
            loop.remove_reader(self.conn.fileno())
        return self.conn.recv()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class VerifierPool:
    """Workers that run the Python verifiers at `paths` (name -> file): `size` of them wait
    ready. A call that finds none idle waits in line; only when every worker is stuck (on one
    verification for STUCK_AFTER_S or more) does it start one of its own. So a verifier that
    hangs holds its own worker until its deadline, never the next episode's turn, and a burst
    of quick verifications waits its turn instead of starting an interpreter each: the
    workers beyond `size` are at most the verifications hung at once, one per episode."""

    def __init__(self, paths: Mapping[str, Path], size: int):
        self.paths = dict(paths)
        self.size = size
        self._waiting: asyncio.Queue[_Worker] | None = None  # made on the loop that serves (see _idle)
        self._workers: set[_Worker] = set()

    async def score(
        self,
        task: dict[str, Any],
        report: dict[str, Any],
        verifiers: Mapping[str, str],
        *,
        timeout_s: float | None = None,
    ) -> dict[str, float]:
        """Every score of an episode (see `verifiers.score_episode`); VerifierError when a
        verifier raises, returns no score, or its worker dies; TimeoutError when they run past
        `timeout_s` (a worker started for them may take as long again to boot). A call
        cancelled, or past its deadline, kills the worker that was running it."""
        if not verifiers:
            return {}
        worker = await self._take()
        try:
            # Two deadlines: booting (a worker started for this call) is not the verifiers' run.
            async with asyncio.timeout(timeout_s):
                await worker.boot()
            async with asyncio.timeout(timeout_s):
                kind, value = await worker.score((task, report, dict(verifiers)))
        except BaseException as error:  # past the deadline, cancelled, or the worker died
            self._stop(worker)
            if isinstance(error, (EOFError, OSError)) and not isinstance(error, TimeoutError):
                raise VerifierError(f"the verifier's worker process died: {error!r}") from None
            raise
        if self._idle.qsize() < self.size:
            self._idle.put_nowait(worker)
        else:  # one started when none was idle: the pool is back to its size
            self._stop(worker)
        if kind == "error":
            raise VerifierError(value)
        return value

    async def _take(self) -> _Worker:
        """An idle worker, waited for in line; a new one once every worker is stuck."""
        while True:
            try:
                async with asyncio.timeout(STUCK_AFTER_S / 4):
                    return await self._idle.get()
            except TimeoutError:
                if all(worker.stuck for worker in self._workers):
                    return self._add()

    def start(self) -> None:
        """Start the waiting workers now, so the first episode's scoring does not wait for
        interpreters to boot and import the verifiers."""
        while self._idle.qsize() < self.size:
            self._idle.put_nowait(self._add())

    async def ready(self, timeout_s: float = BOOT_WAIT_S) -> None:
        """Start the waiting workers and wait until each has imported the verifiers (at most
        `timeout_s`), so that a server says it is up only once it can score at once (a fresh
        server's first reward once took 10-13 s). One that dies or hangs booting is replaced at
        its first use, as ever."""
        self.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(worker.boot() for worker in list(self._workers)), return_exceptions=True)

    @property
    def booted(self) -> int:
        """Workers that have imported the verifiers and wait or work."""
        return sum(worker.booted for worker in self._workers)

    @property
    def alive(self) -> int:
        """Worker processes running now (`size` once started and idle: a killed one is replaced)."""
        return sum(worker.process.is_alive() for worker in self._workers)

    async def aclose(self) -> None:
        for worker in list(self._workers):
            await asyncio.to_thread(worker.kill)
        self._workers.clear()
        self._waiting = None

    @property
    def _idle(self) -> asyncio.Queue[_Worker]:
        """The idle workers, a queue of the loop that first asks for it."""
        if self._waiting is None:
            self._waiting = asyncio.Queue()
        return self._waiting

    def _add(self) -> _Worker:
        worker = _Worker(self.paths)
        self._workers.add(worker)
        return worker

    def _stop(self, worker: _Worker) -> None:
        """Kill `worker`, and start another in its place while fewer than `size` wait."""
        self._workers.discard(worker)
        worker.kill()
        self.start()


def _serve(conn: Connection, paths: dict[str, Path]) -> None:
    """A worker's loop: load the verifiers, then answer each request with its scores."""
    from corral.server.bundles.verifiers import load_verifiers, score_episode

    failed: str | None = None
    try:
        loaded = load_verifiers(paths)
    except VerifierError as error:
        loaded, failed = {}, str(error)
    conn.send(("ready", None))
    while True:
        try:
            task, report, verifiers = conn.recv()
        except EOFError:
            return
        try:
            if failed is not None:
                raise VerifierError(failed)
            conn.send(("ok", score_episode(task, report, verifiers, loaded)))
        except VerifierError as error:
            conn.send(("error", str(error)))
        except Exception as error:  # noqa: BLE001 - whatever a verifier did, the episode reads why
            conn.send(("error", f"{type(error).__name__}: {error}"))
