"""When a cached result of bench/mutation.py still holds: while the tests it ran are as they
were, that is the test files, the conftest.py files above them and the test-suite modules
they import (tests/wire.py, a fake runtime, a stand-in for a cloud), read to the last import."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from mutation_targets import REPO


def tests_ran(tests: list[str], repo: Path = REPO) -> dict:
    """The test files a mutant's run used, with a digest of them and of the test code they
    bring in: the result holds while that digest does."""
    files = sorted({test.split("::")[0] for test in tests})
    return {"test_files": files, "tests_digest": tests_digest(files, repo)}


def tests_digest(files: list[str], repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    for name in sorted(test_sources(files, repo)):
        path = repo / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(gone)") + b"\0")
    return digest.hexdigest()


def still_holds(result: dict, repo: Path = REPO) -> bool:
    """Whether a cached result still holds: its tests are as they were when it ran (a result
    without any ran no test, and holds while its function does)."""
    if "test_files" not in result:
        return result["outcome"] == "survived" and result["why"].startswith("no test")
    return tests_digest(result["test_files"], repo) == result["tests_digest"]


def test_sources(files: list[str], repo: Path) -> set[str]:
    """`files`, the conftest.py files above each, and the modules of the test suite that any of
    them imports (anywhere in it: a test may import a fake inside a function), and so on."""
    sources: set[str] = set()
    pending = list(files)
    while pending:
        name = pending.pop()
        if name in sources:
            continue
        sources.add(name)
        path = repo / name
        pending += [
            str(folder.relative_to(repo) / "conftest.py")
            for folder in path.parents
            if folder.is_relative_to(repo) and (folder / "conftest.py").is_file()
        ]
        if path.suffix == ".py" and path.is_file():
            pending += imported_test_modules(path, repo)
    return sources


def imported_test_modules(path: Path, repo: Path) -> list[str]:
    """The files of the test suite (the `tests` package) that `path` imports, relative to `repo`."""
    package = path.relative_to(repo).parent.parts
    dotted: list[str] = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            dotted += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
                if node.level
                else node.module or ""
            )
            # `from tests.contract import fake_modal` names a module; `from tests.wire import call`, a name.
            dotted += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    files = []
    for name in dotted:
        if name.split(".")[0] != "tests":
            continue
        module = repo / Path(*name.split("."))
        files += [
            str(file.relative_to(repo))
            for file in (module.with_suffix(".py"), module / "__init__.py")
            if file.is_file()
        ]
    return files
