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
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from corral.errors import VerifierError

SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the server's state


class _Worker:
    def __init__(self, paths: Mapping[str, Path]):
        self.conn, child_conn = SPAWN.Pipe()
        self.process: BaseProcess = SPAWN.Process(target=_serve, args=(child_conn, dict(paths)),
                                                  name="corral-verifier", daemon=True)
        self.process.start()
        child_conn.close()

    async def score(self, request: tuple[Any, ...]) -> tuple[str, Any]:
        self.conn.send(request)
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self.conn.fileno(), lambda: answered.done() or answered.set_result(None))
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
    """`size` workers that run the Python verifiers at `paths` (name -> file)."""

    def __init__(self, paths: Mapping[str, Path], size: int):
        self.paths = dict(paths)
        self.size = size
        self._idle: asyncio.Queue[_Worker] | None = None
        self._workers: set[_Worker] = set()

    async def score(self, task: dict[str, Any], report: dict[str, Any], verifiers: Mapping[str, str]) -> dict[str, float]:
        """Every score of an episode (see `verifiers.score_episode`); VerifierError when a
        verifier raises, returns no score, or its worker dies. Cancelling the call (the
        episode's deadline) kills the worker that was running it."""
        if not verifiers:
            return {}
        idle = self._started()
        worker = await idle.get()
        try:
            kind, value = await worker.score((task, report, dict(verifiers)))
        except BaseException as error:  # cancelled at the deadline, or the worker died
            self._replace(worker)
            if isinstance(error, (EOFError, OSError)):
                raise VerifierError(f"the verifier's worker process died: {error!r}") from None
            raise
        idle.put_nowait(worker)
        if kind == "error":
            raise VerifierError(value)
        return value

    def start(self) -> None:
        """Start the workers now (on the serving loop), so the first episode's scoring does
        not wait for interpreters to boot and import the verifiers."""
        self._started()

    @property
    def alive(self) -> int:
        """Worker processes running now (`size` once started: a killed one is replaced)."""
        return sum(worker.process.is_alive() for worker in self._workers)

    async def aclose(self) -> None:
        for worker in list(self._workers):
            await asyncio.to_thread(worker.kill)
        self._workers.clear()
        self._idle = None

    def _started(self) -> asyncio.Queue[_Worker]:
        """The idle workers, starting them if `start` was not called (a pool used on its own)."""
        if self._idle is None:
            self._idle = asyncio.Queue()
            for _ in range(self.size):
                self._add()
        return self._idle

    def _add(self) -> None:
        worker = _Worker(self.paths)
        self._workers.add(worker)
        assert self._idle is not None
        self._idle.put_nowait(worker)

    def _replace(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        worker.kill()
        self._add()


def _serve(conn: Connection, paths: dict[str, Path]) -> None:
    """A worker's loop: load the verifiers, then answer each request with its scores."""
    from corral.server.verifiers import load_verifiers, score_episode

    try:
        loaded = load_verifiers(paths)
    except VerifierError as error:
        loaded, failed = {}, str(error)
    else:
        failed = None
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
