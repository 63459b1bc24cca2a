"""Older Terminal-Bench task folders (task.yaml, run-tests.sh, solution.sh), migrated as Harbor
0.26's `TerminalBenchMapper` migrates them.

    task.yaml      instruction, max_agent_timeout_sec (360), max_test_timeout_sec (60), metadata
    Dockerfile     and the rest of the folder: the build context
    run-tests.sh   becomes tests/test.sh, its $TEST_DIR /tests, with the lines Harbor appends
                   so that its exit status is written to /logs/verifier/reward.txt
    solution.sh    becomes solution/solve.sh
    docker-compose.yaml  dropped when it has one service (its build context is used); kept
                   in environment/ when it has several, so the task is refused as Harbor's are

The migrated task is written once to a folder of corral's (`$TMPDIR/corral-harbor/`), named
by a digest of the original, and read from there like any Harbor task; the original is
never changed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.sandboxes.env_digest import context_digest
from corral.server.harbor.task_files import HarborTask, TaskFileError, read_task

# What Harbor appends to run-tests.sh (harbor/mappers/terminal_bench.py, REWARD_LOGGING_SUFFIX).
REWARD_LOGGING_SUFFIX = """
_EXIT_CODE=$?
if [ $_EXIT_CODE -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit $_EXIT_CODE
"""
_HANDLED = {"task.yaml", "solution.sh", "run-tests.sh", "tests", "docker-compose.yaml", "docker-compose.yml"}


class LegacyConfig(BaseModel):
    """task.yaml, as Harbor's `TerminalBenchTaskConfig` reads it."""

    model_config = ConfigDict(extra="ignore")

    instruction: str
    author_name: str = "unknown"
    difficulty: str = "unknown"
    category: str = "software_engineering"
    tags: list[str] = Field(default_factory=list)
    max_agent_timeout_sec: float = Field(default=360.0, gt=0)
    max_test_timeout_sec: float = Field(default=60.0, gt=0)


def is_legacy(folder: Path) -> bool:
    return (folder / "task.yaml").is_file() and not (folder / "task.toml").is_file()


def read_legacy(folder: Path, cache: Path | None = None) -> HarborTask:
    """The older task in `folder`, migrated; raise TaskFileError saying what is wrong."""
    try:
        raw = yaml.safe_load((folder / "task.yaml").read_text())
        config = LegacyConfig.model_validate(raw)
    except yaml.YAMLError as error:
        raise TaskFileError(f"task.yaml is not valid YAML: {error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        raise TaskFileError(f"task.yaml: {'.'.join(map(str, first['loc']))!r}: {first['msg']}") from None
    if (folder / "solution.yaml").is_file():
        raise TaskFileError(
            "solution.yaml is not supported (Harbor does not migrate it either); convert it to solution.sh"
        )
    if not (folder / "run-tests.sh").is_file():
        raise TaskFileError("run-tests.sh is missing; an older Terminal-Bench task runs its tests with it")
    target = (cache or _cache_root()) / f"{folder.name}-{context_digest(folder)}"
    if not target.is_dir():
        _migrate(folder, config, target)
    task = read_task(target, task_id=folder.name)
    return HarborTask(task.id, task.folder, task.config, task.instruction, migrated_from=folder)


def _migrate(source: Path, config: LegacyConfig, target: Path) -> None:
    """Write the Harbor form of `source` at `target`, atomically (a half-written folder is never read)."""
    building = target.with_name(f".{target.name}-{uuid.uuid4().hex[:8]}")
    environment = building / "environment"
    context = _build_context(source)
    shutil.copytree(context, environment, ignore=_ignore_handled(source) if context == source else None)
    compose = _compose(source)
    if compose is not None and len(compose.get("services") or {}) > 1:
        shutil.copy(source / "docker-compose.yaml", environment / "docker-compose.yaml")
    tests = building / "tests"
    if (source / "tests").is_dir():
        shutil.copytree(source / "tests", tests)
    tests.mkdir(parents=True, exist_ok=True)
    run_tests = (source / "run-tests.sh").read_text()
    run_tests = run_tests if run_tests.endswith("\n") else run_tests + "\n"
    (tests / "test.sh").write_text((run_tests + REWARD_LOGGING_SUFFIX).replace("$TEST_DIR", "/tests"))
    if (source / "solution.sh").is_file():
        (building / "solution").mkdir()
        shutil.copy(source / "solution.sh", building / "solution" / "solve.sh")
    instruction = config.instruction if config.instruction.endswith("\n") else config.instruction + "\n"
    (building / "instruction.md").write_text(instruction)
    (building / "task.toml").write_text(_task_toml(config))
    try:
        building.rename(target)
    except OSError:  # another process migrated it meanwhile: theirs is the same
        shutil.rmtree(building, ignore_errors=True)


def _build_context(source: Path) -> Path:
    """The folder the main service builds from: docker-compose.yaml's `build.context`, else the task's."""
    compose = _compose(source)
    if not compose:
        return source
    services = compose.get("services") or {}
    main: object = services.get("client") or services.get("main") or next(iter(services.values()), {})
    build = main.get("build") if isinstance(main, dict) else None
    context = build.get("context", ".") if isinstance(build, dict) else (build or ".")
    resolved = (source / str(context)).resolve()
    if not resolved.is_dir() or not resolved.is_relative_to(source.resolve()):
        raise TaskFileError(f"docker-compose.yaml builds from {context!r}, which is not a folder of the task")
    return source if resolved == source.resolve() else resolved


def _compose(source: Path) -> dict[str, Any] | None:
    for name in ("docker-compose.yaml", "docker-compose.yml"):
        if (source / name).is_file():
            try:
                loaded = yaml.safe_load((source / name).read_text())
            except yaml.YAMLError as error:
                raise TaskFileError(f"{name} is not valid YAML: {error}") from None
            return loaded if isinstance(loaded, dict) else None
    return None


def _ignore_handled(source: Path):
    def ignore(folder: str, names: list[str]) -> set[str]:
        return {name for name in names if Path(folder) == source and name in _HANDLED}

    return ignore


def _task_toml(config: LegacyConfig) -> str:
    """task.toml of the migrated task (JSON strings are TOML's basic strings)."""
    return (
        f"[metadata]\nauthor_name = {json.dumps(config.author_name)}\ndifficulty = {json.dumps(config.difficulty)}\n"
        f"category = {json.dumps(config.category)}\ntags = {json.dumps(config.tags)}\n\n"
        f"[agent]\ntimeout_sec = {config.max_agent_timeout_sec}\n\n"
        f"[verifier]\ntimeout_sec = {config.max_test_timeout_sec}\n"
    )


def _cache_root() -> Path:
    root = Path(tempfile.gettempdir()) / f"corral-harbor-{os.getuid()}" / "migrated"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root
