"""The env's imports, kept to files the agent could not have written.

corral's runtime leaves off the env's import path every folder the agent's user could write
in (runtime._imports_out_of_the_agents_reach). That covers the path's own entries, not what
is inside them: a package folder, or a `__pycache__` beside a module, that the agent may write
in (one made group-writable for the env's group, which the agent's user is in) would still
let it put code the env then runs: a module the env imports later, or bytecode read in place
of its source (Python checks only the source's size and time). So where the agent has a user of
its own, every module the path finder finds is refused, with its path, when its file or its
bytecode cache is within the agent's reach (`agent.within_reach`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from corral.env import agent


class OutOfReachFinder(importlib.abc.MetaPathFinder):
    """Python's path finder, refusing what the agent could have written."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not spec.has_location:
            return spec
        cached = spec.cached if spec.origin and spec.origin.endswith(".py") else None
        for file in filter(None, (spec.origin, cached)):
            if agent.within_reach(file):
                raise ImportError(
                    f"corral.env: {fullname} is not imported from {file}: the agent's commands may "
                    "write there; make the env's files and folders writable by the env's user only "
                    "(not its group)",
                    name=fullname,
                    path=file,
                )
        return spec

    def invalidate_caches(self) -> None:
        importlib.machinery.PathFinder.invalidate_caches()


def guard() -> None:
    """Put OutOfReachFinder in place of Python's path finder where the agent has a user of its own."""
    if agent.identity() is None:
        return
    sys.meta_path[:] = [
        OutOfReachFinder() if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path
    ]
