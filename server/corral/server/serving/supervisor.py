"""`corral serve --workers N`: N server processes behind one port, so one env host uses every core.

The supervisor (this process) binds the port, opens the bundle once (its checks, its images,
and the hold on the server's instance: a second host of the instance refuses), then spawns
N workers that accept on the same listening socket; the kernel hands each new connection to
one of them. Worker K is a whole server of its own: it opens the bundle as instance
`INSTANCE-wK`, so its sandboxes, local folders and container labels are its own, and the
worker that replaces it reaps what it left. The session limit is the host's (workers.seat); so
is /metrics, which the worker asked sums over every worker's private Unix socket (workers.metrics).
A session created over HTTP is reached from every worker: its id names its worker, and a request
for it that reaches another is passed on over that same socket (workers.forward).

A worker that dies costs only the episodes it held (their sockets close) and is replaced;
one that dies before it ever served stops the host, since its replacement would fail alike.
Workers die with the supervisor, however it ends. A worker reaps what a killed one of its
instance left as it starts; what the workers past N of a killed host of more workers left is
reaped before the host serves (`reap_dropped_workers`: their private sockets, left in the
folder, say which).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

import uvicorn

from corral.errors import CorralError
from corral.sandboxes import SandboxProvider, make_provider
from corral.sandboxes.runtime_dirs import private_folder, safe_name
from corral.server.serving.app import create_app, socket_settings
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle
from corral.server.workers.seat import SOCKET_NAME, WorkerSeat, socket_name

log = logging.getLogger("corral.server")

STOP_TIMEOUT_S = 60.0  # a worker's time to tear its episodes down before it is killed
PR_SET_PDEATHSIG = 1  # prctl(2)


def worker_instance(instance: str, index: int) -> str:
    """Worker `index`'s instance name: its sandboxes', folders' and containers'."""
    return f"{instance}-w{index}"


class Supervisor:
    """Starts `count` workers serving `root` on `listener`, replaces those that die, stops them all."""

    def __init__(self, root: Path, options: ServeOptions, listener: socket.socket, count: int):
        self.root, self.options, self.listener, self.count = root, options, listener, count
        self._context = multiprocessing.get_context("spawn")  # no fork: the supervisor holds threads
        self.sessions = self._context.RawArray("i", count)
        self.pids = self._context.RawArray("i", count)
        assert options.instance is not None
        self.folder = workers_folder(options.instance)
        self.processes: list[BaseProcess] = []
        self._stopping = False

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT (0), or until a worker fails to start (1)."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            private_folder(Path(self.folder), 0o700)
            self.processes = [self._start(index) for index in range(self.count)]
            return self._watch()
        finally:
            self._stop_all()
            shutil.rmtree(self.folder, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self, index: int) -> BaseProcess:
        seat = WorkerSeat(index, self.sessions, self.pids, self.folder)
        process = self._context.Process(
            target=_work,
            name=f"corral-worker-{index}",
            daemon=False,
            args=(self.root, self.options, seat, self.listener, os.getpid()),
        )
        process.start()
        return process

    def _watch(self) -> int:
        announced = False
        while not self._stopping:
            multiprocessing.connection.wait([process.sentinel for process in self.processes], timeout=1.0)
            for index, process in enumerate(self.processes):
                if process.is_alive() or self._stopping:
                    continue
                served = self.pids[index] != 0
                self.pids[index] = self.sessions[index] = 0  # its sessions ended with it
                if not served:
                    log.error(
                        "worker %d exited (status %s) before it served; stopping the host: see its log above",
                        index,
                        process.exitcode,
                    )
                    return 1
                log.warning(
                    "worker %d (pid %d) exited (status %s): its episodes ended; starting another",
                    index,
                    process.pid,
                    process.exitcode,
                )
                self.processes[index] = self._start(index)
            if not announced and all(self.pids):
                announced = True
                log.info("all %d workers are serving", self.count)
        return 0

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _stop_all(self) -> None:
        """SIGTERM each worker once (it tears its episodes down), then SIGKILL the late ones."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                log.warning("worker %s did not stop within %.0fs; killing it", process.name, STOP_TIMEOUT_S)
                process.kill()
                process.join()


def workers_folder(instance: str) -> str:
    """The workers' private sockets: the same folder after a restart, so a killed host leaves one at most."""
    return os.path.join(tempfile.gettempdir(), f"corral-{safe_name(instance)}-workers")


def reap_dropped_workers(options: ServeOptions, count: int) -> None:
    """Reap what the workers numbered `count` or more of a killed host of the instance left
    (blocking; `count` 1 is a host of one process, which keeps no workers' folder)."""
    assert options.instance is not None
    folder = workers_folder(options.instance)
    if not os.path.isdir(folder):
        return
    private_folder(Path(folder), 0o700)  # a folder another user made is refused, not read
    marked = (SOCKET_NAME.fullmatch(name) for name in os.listdir(folder))
    for index in sorted(index for match in marked if match and (index := int(match[1])) >= count):
        instance = worker_instance(options.instance, index)
        log.info("reaping what worker %d of a killed host left (instance %s)", index, instance)
        asyncio.run(
            _reaped(make_provider(options.sandbox, instance=instance, unsafe_local_shell=options.unsafe_local_shell))
        )
        os.unlink(os.path.join(folder, socket_name(index)))
    if count == 1:
        shutil.rmtree(folder, ignore_errors=True)


async def _reaped(provider: SandboxProvider) -> None:
    try:
        await provider.reap_leftovers()
    finally:
        await provider.aclose()


def _work(root: Path, options: ServeOptions, seat: WorkerSeat, listener: socket.socket, parent: int) -> None:
    """A worker's whole life: open the bundle as its own instance, serve it on `listener`."""
    _die_with(parent)
    os.setpgrp()  # a Ctrl-C in the terminal reaches the supervisor alone, which stops each worker once
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s worker {seat.index} %(name)s: %(message)s")
    assert options.instance is not None
    options = dataclasses.replace(options, instance=worker_instance(options.instance, seat.index))
    try:
        served = asyncio.run(ServedBundle.open(root, options))
    except CorralError as error:
        log.error("worker %d cannot serve: %s", seat.index, error)
        sys.exit(1)
    config = uvicorn.Config(create_app(served, seat), log_level="info", **socket_settings(served))
    uvicorn.Server(config).run(sockets=[listener, _private_socket(seat)])


def _private_socket(seat: WorkerSeat) -> socket.socket:
    """This worker's Unix socket, where the other workers ask for its /metrics and pass on requests for its sessions."""
    path = seat.socket_path(seat.index)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # the socket of the worker this one replaces
    private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    private.bind(path)
    return private


def _die_with(parent: int) -> None:
    """Have the kernel SIGTERM this worker when the supervisor ends, SIGKILL included."""
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere workers may outlive a killed one
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the request took hold
        sys.exit(0)
