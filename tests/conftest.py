"""Shared test fixtures: the repository's paths, the Docker engine, and a check that no env
process outlives a test."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from corral.server.serving.embedded import EmbeddedServer
from corral.server.serving.options import ServeOptions

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "bundles"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The fixtures hold the tasks' own tests (a Harbor task runs them in its container), not corral's.
collect_ignore_glob = ["fixtures/*"]

# The fast tier (`pytest -m fast`): every test in tests/unit, plus the fake-backed tests that
# carry the `fast` marker themselves (tests/contract: the modal provider on fake_modal). A unit
# test that starts something slow (the `corral` command, a process pool, a Jupyter kernel, TRL)
# opts out with `@pytest.mark.slow`; tests that use a server or Docker are never in the tier.
# tests/unit/test_fast_tier.py checks every test in the tier against these sets.
FAST_BY_FOLDER = "unit"
FAST_FOLDERS = {"unit", "contract"}
# Unit modules that import TRL as they load: `-m fast` does not import them (about 10 s of CPU).
NOT_FAST_MODULES = {"test_processors.py"}
NOT_FAST_MARKERS = {"slow", "docker", "trl", "vllm"}
SLOW_FIXTURES = {"docker_engine", "serve"}
# Under `-m fast` each test gets this long (over any longer timeout its module sets): a test
# waiting on something this machine lacks fails with a traceback instead of hanging the tier.
FAST_TIMEOUT_S = 30


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m fast`, the folders with no fast test are not even imported (tests/e2e alone
    imports TRL and torch as it loads), nor the unit modules that import TRL."""
    if config.option.markexpr.strip() != "fast":
        return None
    tests = Path(__file__).parent
    if collection_path.parent == tests and collection_path.is_dir():
        return True if collection_path.name not in FAST_FOLDERS else None
    if collection_path.parent == tests / FAST_BY_FOLDER and collection_path.name in NOT_FAST_MODULES:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit = Path(__file__).parent / FAST_BY_FOLDER
    for item in items:
        opted_out = any(item.get_closest_marker(name) for name in NOT_FAST_MARKERS)
        slow_fixture = SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
        if item.path.is_relative_to(unit) and not opted_out and not slow_fixture:
            item.add_marker(pytest.mark.fast)
        if config.option.markexpr.strip() == "fast" and item.get_closest_marker("fast"):
            item.add_marker(pytest.mark.timeout(FAST_TIMEOUT_S), append=False)


NEEDS_BWRAP = "needs bubblewrap, and `bwrap` is not on PATH: run .ci/setup-machine (or apt-get install bubblewrap)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `bwrap` (the local sandbox's namespaces, the Kubernetes stand-in's pods)
    skips where bubblewrap is missing, and fails under CI=true."""
    if item.get_closest_marker("bwrap") and shutil.which("bwrap") is None:
        skip_or_fail_under_ci(NEEDS_BWRAP)


@pytest.fixture(scope="session")
def as_root() -> None:
    """Tests of the host uids a local server gives its agents: only a root server gives them."""
    if os.geteuid() != 0:
        skip_or_fail_under_ci(
            "a local server gives the agent a host uid of its own only as root (CI runs the tests as root)"
        )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """What the run skipped, grouped by reason: each reason names what would un-skip it."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.section("what this run skipped, and what would run it", sep="=", yellow=True)
        for reason, count in sorted(reasons.items(), key=lambda pair: -pair[1]):
            terminalreporter.write_line(f"{count:4d} skipped: {reason}")


def env_processes() -> list[int]:
    """Pids of env runtimes (`python3 -m corral.env ...`) started by this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if b"corral.env" in cmdline and ppid == os.getpid():
            found.append(int(entry.name))
    return found


def processes_running(text: str) -> list[int]:
    """Pids of live processes whose command line holds `text` (a killed one's, a zombie's, is
    empty): a test gives a command an argument nothing else has, e.g. `sleep 4100.8123`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_until_none(find: Callable[[], list[int]], timeout_s: float) -> list[int]:
    """Wait until `find()` finds no process; return those it still finds at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def wait_for_no_env_processes(timeout_s: float = 10.0) -> list[int]:
    """Wait until every env process is gone; return those still there at the deadline."""
    return wait_until_none(env_processes, timeout_s)


@pytest.fixture
def no_leftover_env_processes():
    """Fails the test if an env process it started is still running after it ends."""
    yield
    assert wait_for_no_env_processes() == [], "env processes outlived the test"


def skip_or_fail_under_ci(message: str) -> NoReturn:
    """Skip a test this machine cannot run, saying why; under CI=true fail it instead: CI
    provides everything the tests need, so a missing piece there is a broken run."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def docker_engine():
    """A client of this machine's Docker engine. Without one the test skips, except under
    CI=true, where it fails: CI starts an engine, so a missing one is a broken run."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as error:  # noqa: BLE001 (any failure means no usable engine)
        skip_or_fail_under_ci(
            f"no Docker engine answers ({type(error).__name__}: {error}); start one with: "
            ".ci/setup-machine (or: bash ../shared/ci/docker-engine.sh)"
        )
    yield client
    client.close()


def serving(root: Path, **options) -> Iterator[EmbeddedServer]:
    """An embedded server of `root` with ServeOptions `options` (the local sandbox unless one is
    named: tests/docker covers docker); stopped when the generator is closed or exhausted."""
    keepalive = options.pop("keepalive", 20.0)
    options.setdefault("sandbox", "local")
    server = EmbeddedServer(root, ServeOptions(**options), ws_ping_interval=keepalive, ws_ping_timeout=keepalive)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def serve():
    """Start a server with options for one test: `serve(path, max_concurrent_envs=2, ...)`."""
    running: list[Iterator[EmbeddedServer]] = []

    def start(root: Path, **options) -> EmbeddedServer:
        running.append(serving(root, **options))
        return next(running[-1])

    yield start
    for server in running:
        next(server, None)  # runs its teardown
