"""What is wrong with a bundle, as `corral check` prints it: each problem names its file and the
fix, and one shared by many tasks is said once for all of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from corral.errors import BundleInvalid

TASKS_SHOWN = 3  # a problem shared by many tasks names this many of them


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a bundle: where, and what to change."""

    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


def problems_of(error: BundleInvalid) -> list[Problem]:
    """The problems of a bundle the server refused (corral.errors, below the server, holds them
    as objects)."""
    assert all(isinstance(problem, Problem) for problem in error.problems)
    return cast(list[Problem], error.problems)


def merge_shared(problems: list[Problem]) -> list[Problem]:
    """One problem for each message that several tasks share, naming how many and a few of them
    (`2,200 tasks (a, b, c and 2,197 more): ...`), in place of one line per task."""
    sharing: dict[str, dict[str, None]] = {}  # message -> the tasks that report it, in order
    for problem in problems:
        if (task := _task_of(problem)) is not None:
            sharing.setdefault(problem.message, {})[task] = None
    merged: list[Problem] = []
    reported: set[str] = set()
    for problem in problems:
        tasks = list(sharing[problem.message]) if _task_of(problem) is not None else []
        if len(tasks) < 2:
            merged.append(problem)
        elif problem.message not in reported:  # the first of them stands for all
            reported.add(problem.message)
            more = f" and {len(tasks) - TASKS_SHOWN:,} more" if len(tasks) > TASKS_SHOWN else ""
            merged.append(Problem(f"{len(tasks):,} tasks ({', '.join(tasks[:TASKS_SHOWN])}{more})", problem.message))
    return merged


def _task_of(problem: Problem) -> str | None:
    """The task a problem is about (`task <id>`, a tasks.jsonl line, a tasks/ file), if one."""
    if problem.file.startswith("task "):
        return problem.file.removeprefix("task ")
    if re.search(r"tasks\.jsonl:\d+$|/tasks/[^/]+\.json$", problem.file):
        return problem.file
    return None


def file_name(root: Path, path: Path) -> str:
    """How a problem names a file of the bundle at `root`: from the bundle's folder name on."""
    return str(path.relative_to(root.parent)) if path.is_relative_to(root.parent) else str(path)
