"""A module's mutants (cosmic-ray's, less annotations and the operators not kept), each keyed
by the code around it, and one mutant's run: its tests on the mutated file, and what pytest's
exit status says of it."""

from __future__ import annotations

import ast
import difflib
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cosmic_ray.plugins
from cosmic_ray.commands.init import init as list_mutants
from cosmic_ray.mutating import use_mutation
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import MutationSpec

from mutation_cache import tests_ran
from mutation_choice import innermost_function
from mutation_reach import Reach
from mutation_targets import KEPT_OPERATORS, REPO, TEST_SECONDS


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations = []
        if isinstance(node, ast.arg | ast.AnnAssign):
            annotations.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in annotations if a]
    return spans


def mutants_of(path: str, workdir: Path) -> list[MutationSpec]:
    """cosmic-ray's mutants of `path`, less the operators not kept and those in annotations."""
    with use_db(str(workdir / f"{Path(path).stem}.sqlite"), WorkDB.Mode.create) as db:
        list_mutants([REPO / path], db, {})
        specs = [item.mutations[0] for item in db.work_items]
    source = (REPO / path).read_text()
    spans, lines = annotation_spans(source), source.splitlines()
    return [
        spec
        for spec in specs
        if spec.operator_name.split("/")[-1] in KEPT_OPERATORS
        and not any(start <= tuple(spec.start_pos) < end for start, end in spans)
        and not is_bare_star(lines, spec)
    ]


def is_bare_star(lines: list[str], spec: MutationSpec) -> bool:
    """The `*` that ends a signature's positional parameters, which cosmic-ray takes for a
    multiplication (and its `/` for another marker: the same calls still work)."""
    line, column = spec.start_pos
    text = lines[line - 1]
    return text[column : column + 1] == "*" and text[column + 1 :].lstrip()[:1] in (",", ")")


def keyed(path: str, specs: list[MutationSpec]) -> dict[str, MutationSpec]:
    """The mutants by a key that holds while the code around them does: the operator, a digest
    of the innermost function holding the mutant (of its own line, outside any function), and
    its place among that function's mutants of the operator. A module edited in one function
    keeps the results of the others (and a result whose tests changed is dropped: still_holds)."""
    lines = (REPO / path).read_text().splitlines()
    keys: dict[str, MutationSpec] = {}
    for spec in specs:
        line = spec.start_pos[0]
        first, last = innermost_function(REPO / path, line) or (line, line)
        scope = hashlib.sha256("\n".join(lines[first - 1 : last]).encode()).hexdigest()[:16]
        operator, place = spec.operator_name.split("/")[-1], 1
        while f"{operator}|{scope}|{place}" in keys:
            place += 1
        keys[f"{operator}|{scope}|{place}"] = spec
    return keys


# What pytest's exit status says of a mutant: 0 every test passed, 1 a test failed; 2 to 5 it
# could not collect or run them (interrupted, an internal error, a usage error, no tests).
PYTEST_OUTCOMES = {0: "survived", 1: "killed", 2: "not run", 3: "not run", 4: "not run", 5: "not run"}
INCONCLUSIVE = ("not run", "crashed", "timeout")  # no test judged the mutant: reported apart, out of the scores


def run_mutant(spec: MutationSpec, tests: list[str], reach: Reach) -> dict:
    if not tests:
        return {"outcome": "survived", "why": f"no test of {TEST_SECONDS:g} s or less reaches this line"}
    timeout = 60 + 3 * sum(reach.seconds.get(test, TEST_SECONDS) for test in tests)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    operator = cosmic_ray.plugins.get_operator(spec.operator_name)(**spec.operator_args)
    started = time.monotonic()
    try:
        with use_mutation(spec.module_path, operator, spec.occurrence) as (original, mutated):
            if mutated is None:
                return {"outcome": "error", "why": "cosmic-ray made no mutant at this place"}
            status, output = run_tests(command, timeout)
    except Exception as error:  # noqa: BLE001 - cosmic-ray failed to make the mutant (it puts the file back)
        return {"outcome": "error", "why": f"{type(error).__name__}: {error}"}
    seconds = round(time.monotonic() - started, 1)
    diff = "\n".join(
        [
            "--- mutation diff ---",
            *difflib.unified_diff(
                original.split("\n"), mutated.split("\n"), f"a/{spec.module_path}", f"b/{spec.module_path}", lineterm=""
            ),
        ]
    )
    outcome = outcome_of(status)
    why = (
        f"{len(tests)} tests, pytest exit status {status}"
        if status is not None
        else f"the tests outlasted {timeout:.0f} s"
    )
    result = {"outcome": outcome, "why": why, "seconds": seconds, "diff": diff, **tests_ran(tests)}
    if outcome in INCONCLUSIVE:
        result["output"] = output[-2000:]
    if outcome == "killed":  # which test failed: a kill by a flaky test, or by a test of something else, shows
        result["failed"] = [line[:300] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))][:3]
    return result


def outcome_of(status: int | None) -> str:
    """What pytest's exit status says of a mutant (None: its tests outlasted their timeout)."""
    if status is None:
        return "timeout"
    return PYTEST_OUTCOMES.get(status, "crashed")  # a signal's negative status, or another


def run_tests(command: list[str], timeout: float) -> tuple[int | None, str]:
    """pytest's exit status (None: past `timeout`, its whole process group killed) and output."""
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # a stale .pyc must not hide a mutant
    process = subprocess.Popen(
        command, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output.decode("utf-8", errors="replace")
    except BaseException:  # the run stopped (Ctrl-C, SIGTERM): its tests must not run on, in a session of their own
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return process.returncode, output.decode("utf-8", errors="replace")
