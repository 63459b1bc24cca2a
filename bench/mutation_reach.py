"""The coverage run of bench/mutation.py: which fast test reaches each line of the mutated
modules, and how long each test takes (kept in .mutation-reach.json while no code or test
changes)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from mutation_targets import (
    CONTRACT_ON,
    CONTRACT_TESTS,
    FAST_TESTS,
    MODULES,
    REACH_CACHE,
    REPO,
    SLOW_TESTS,
)


@dataclass(frozen=True)
class Reach:
    """What the coverage run found: the tests reaching each line, and each test's seconds."""

    tests_by_line: dict[str, dict[int, set[str]]]  # module path -> line -> test node ids
    seconds: dict[str, float]


def measure_reach(workdir: Path) -> Reach:
    """Run the fast tests once under coverage, one context per test (or reuse the last run's
    findings, when no source file or test has changed since)."""
    digest = code_digest()
    if REACH_CACHE.exists() and (cached := json.loads(REACH_CACHE.read_text()))["digest"] == digest:
        print("reusing the last coverage run (no code or test changed)", flush=True)
        by_line = {
            path: {int(line): set(tests) for line, tests in lines.items()}
            for path, lines in cached["tests_by_line"].items()
        }
        return Reach(tests_by_line=by_line, seconds=cached["seconds"])
    paths = [target.path for target in MODULES.values()]
    junit = workdir / "junit.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *FAST_TESTS,
        *contract_tests(),
        *(f"--ignore={slow}" for slow in SLOW_TESTS),
        "--cov-context=test",
        "--cov-report=",
        f"--junitxml={junit}",
        *(f"--cov={REPO / folder}" for folder in {str(Path(p).parent) for p in paths}),
    ]
    print(
        f"coverage run of the fast tests ({' '.join(FAST_TESTS)}, {CONTRACT_TESTS} on {' '.join(CONTRACT_ON)}) ...",
        flush=True,
    )
    environ = {**os.environ, "COVERAGE_FILE": str(workdir / "coverage")}
    if subprocess.run(command, cwd=REPO, env=environ, check=False).returncode != 0:
        sys.exit("the fast tests fail without any mutant: mend them first")
    reach = Reach(tests_by_line=lines_reached(workdir / "coverage", paths), seconds=test_seconds(junit))
    REACH_CACHE.write_text(
        json.dumps(
            {
                "digest": digest,
                "seconds": reach.seconds,
                "tests_by_line": {
                    path: {line: sorted(tests) for line, tests in lines.items()}
                    for path, lines in reach.tests_by_line.items()
                },
            }
        )
    )
    return reach


def contract_tests() -> list[str]:
    """The node ids of the provider contract suite's runs on the providers of CONTRACT_ON."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", CONTRACT_TESTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in listed.splitlines() if line.endswith(CONTRACT_ON)]


def code_digest() -> str:
    """A digest of every Python file of the source roots and the tests, and of which tests run."""
    files = sorted(
        file
        for root in ("protocol", "client", "server", "sandboxes", "training", "tests")
        for file in (REPO / root).rglob("*.py")
    )
    digest = hashlib.sha256(json.dumps([FAST_TESTS, CONTRACT_ON, SLOW_TESTS]).encode())
    for file in files:
        digest.update(str(file.relative_to(REPO)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def lines_reached(coverage_file: Path, paths: list[str]) -> dict[str, dict[int, set[str]]]:
    """Per module, the tests that ran each line. A line run while the tests were imported (a
    table, a class body, a class a test module builds at its top) is reached by every test that
    reaches the module at all: coverage cannot tell whose import ran it."""
    from coverage import CoverageData

    data = CoverageData(basename=str(coverage_file))
    data.read()
    reached: dict[str, dict[int, set[str]]] = {}
    for path in paths:
        # pytest-cov names a context "NODEID|setup", "NODEID|run" or "NODEID|teardown"; "" is no test.
        contexts_by_line = data.contexts_by_lineno(str(REPO / path))
        by_line = {
            line: {context.rsplit("|", 1)[0] for context in contexts if context}
            for line, contexts in contexts_by_line.items()
        }
        every_test = set().union(*by_line.values())
        reached[path] = {
            line: tests | every_test if "" in contexts_by_line[line] else tests for line, tests in by_line.items()
        }
    return reached


def test_seconds(junit: Path) -> dict[str, float]:
    """Each test's node id and seconds, from JUnit XML (whose class names drop the path)."""
    seconds = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        dotted, name = case.get("classname", ""), case.get("name", "")
        parts = dotted.split(".")
        # The longest dotted prefix that is a file is the module; the rest is a class.
        for cut in range(len(parts), 0, -1):
            if (REPO / Path(*parts[:cut])).with_suffix(".py").is_file():
                nodeid = "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])
                seconds[nodeid] = float(case.get("time", 0))
                break
    return seconds
