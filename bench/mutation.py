"""Mutation testing of corral's core modules: which planted bugs the fast tests catch.

    python bench/mutation.py                     # every module below (hours: sample with --most)
    python bench/mutation.py episode sessions    # some of them
    python bench/mutation.py --again sessions    # its survivors only, after mending tests
    python bench/mutation.py --most 40 local     # a random sample of 40 more of its mutants

Run it in a clone you are not editing: each mutant is written into its source file in
place (by cosmic-ray, which puts the file back after the mutant's run).

1. One coverage run of the fast tests (unit and integration, the provider contract suite
   on the local and docker sandboxes and on the stand-in for Modal's cloud, and the docker
   sandbox's own tests: a Docker engine must be running) records which test reaches each
   line of the modules, and how long each test takes.
2. cosmic-ray lists the mutants of each module, with a selective set of its operators: one
   replacement per operator site (`-` becomes `+`, `<` becomes `<=`, not all ten of
   each), none inside type annotations (`str | None` is not behaviour).
3. Each mutant runs the tests that reach its line (those of the module's own test files
   first, up to OWN_TEST_SECONDS of their time, then the others up to TEST_SECONDS; in each
   group those that run the rare lines of its function first, then the fastest), stopping
   at the first failure. A mutant is killed only when a test fails on it (pytest's exit
   status 1); one whose tests pytest could not collect or run (status 2 to 5), that crashed
   them or that outlasted their timeout is inconclusive, reported apart and left out of the
   scores. A line run while the tests were imported is reached by every test that reaches
   the module.
   A module's `child_tests`, which run it where the coverage run does not see (the env
   runtime and the local sandbox of a server that is not root, in child processes; the modal
   provider's own tests against the stand-in for Modal's cloud), run first for each of its
   mutants.
4. Per module: the score (killed / judged by a test, and again less the survivors of a kind
   that cannot change behaviour: asserts, frozen flags, tuning constants), every survivor with its
   diff, printed and kept in bench/results/mutation/NAME.md; results are cached per mutant in
   NAME.json, so a run stopped halfway goes on where it stopped. A result holds while the
   mutant's function and the test files it ran (and their conftest.py files) are unchanged:
   an edited function's mutants, and those whose tests were edited, run again.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import cosmic_ray.plugins
from cosmic_ray.commands.init import init as list_mutants
from cosmic_ray.mutating import use_mutation
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import MutationSpec

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "mutation"
REACH_CACHE = REPO / ".mutation-reach.json"  # the coverage run's findings, while no code or test changes

# The fast tests: unit and integration, less the few that drive a kernel, a terminal or a load;
# the docker sandbox's own tests (seconds each, on a running engine: not an engine stopped,
# nor images built); and the provider contract suite's runs on the local and docker sandboxes
# and on the modal sandbox against tests/contract/fake_modal.py.
DOCKER_TESTS = tuple(f"tests/docker/test_{name}.py" for name in (
    "provider", "hardening", "channel", "commands", "warm_pool", "reaper", "forgery_docker"))
FAST_TESTS = ["tests/unit", "tests/integration", *DOCKER_TESTS]
CONTRACT_TESTS, CONTRACT_ON = "tests/contract/test_provider_contract.py", ("[local]", "[docker]", "[modal-fake]")
# A mutant runs the fastest tests that reach it up to this much of their own time: a survivor
# is one that the quickest checks of its line let through (slower ones might still catch it).
TEST_SECONDS = 10.0
OWN_TEST_SECONDS = 30.0  # and the module's own test file, which is written to check it, up to this
SLOW_TESTS = ["tests/integration/test_load.py", "tests/integration/test_notebook.py",
              "tests/integration/test_play_terminal.py"]


@dataclass(frozen=True)
class Target:
    path: str
    own_tests: tuple[str, ...] = ()  # the test files (or tests) written to check it: run first, on a budget of their own
    # Tests that run the module where the coverage run does not see it (a child process, a suite
    # outside the fast tests): run first for every mutant.
    child_tests: tuple[str, ...] = ()


UNIT, INTEGRATION = "tests/unit/", "tests/integration/"
ENDINGS_TESTS = INTEGRATION + "test_endings.py"  # how episodes end, and the warning of one left unscored
LOCAL_TESTS = (INTEGRATION + "test_local_isolation.py", INTEGRATION + "test_local_anywhere.py", CONTRACT_TESTS,
               UNIT + "test_sandbox_providers.py")
# The local sandbox of a server that is not root, run as another user in a child process.
LOCAL_AS_NOBODY = tuple(INTEGRATION + "test_local_isolation.py::" + test for test in (
    "test_a_restarted_server_removes_what_a_killed_one_of_its_instance_left[nobody]",
    "test_a_user_other_than_root_checks_a_bundle_and_starts_envs_in_a_folder_of_its_own"))
MODULES = {
    "episode": Target("server/corral/server/episode.py", (
        UNIT + "test_episode_endings.py", INTEGRATION + "test_episodes.py", ENDINGS_TESTS,
        INTEGRATION + "test_mcp_env.py", UNIT + "test_tool_answers.py",
        INTEGRATION + "test_records.py::test_an_episodes_record_holds_every_call_in_order_with_answers_errors_and_timing")),
    "endings": Target("server/corral/server/endings.py", (ENDINGS_TESTS,)),
    "canary": Target("server/corral/server/canary.py", (UNIT + "test_episode_endings.py", ENDINGS_TESTS)),
    "scoring": Target("server/corral/server/scoring.py", (
        UNIT + "test_episode_endings.py", ENDINGS_TESTS, INTEGRATION + "test_command_verifiers.py")),
    "env_inprocess": Target("server/corral/server/env_inprocess.py", (UNIT + "test_env_inprocess.py",)),
    "env_connection": Target("server/corral/server/env_connection.py", (
        UNIT + "test_env_inprocess.py", UNIT + "test_envproc.py", UNIT + "test_episode_endings.py")),
    "sessions": Target("server/corral/server/sessions.py", (
        INTEGRATION + "test_openenv_compat.py", ENDINGS_TESTS,
        INTEGRATION + "test_records.py::test_a_reset_naming_a_task_alone_records_the_split_the_task_belongs_to")),
    "verifiers": Target("server/corral/server/verifiers.py",
                        (UNIT + "test_verifiers.py", INTEGRATION + "test_command_verifiers.py")),
    "envproc": Target("server/corral/server/envproc.py", (UNIT + "test_envproc.py",)),
    "local": Target("sandboxes/corral/sandboxes/local.py", LOCAL_TESTS, child_tests=LOCAL_AS_NOBODY),
    "local_sandbox": Target("sandboxes/corral/sandboxes/local_sandbox.py", LOCAL_TESTS, child_tests=LOCAL_AS_NOBODY),
    "local_procs": Target("sandboxes/corral/sandboxes/local_procs.py", LOCAL_TESTS),
    "local_files": Target("sandboxes/corral/sandboxes/local_files.py", LOCAL_TESTS),
    "docker": Target("sandboxes/corral/sandboxes/docker_sandbox.py", (CONTRACT_TESTS, *DOCKER_TESTS)),
    "modal": Target("sandboxes/corral/sandboxes/modal_sandbox.py", (CONTRACT_TESTS,),
                    child_tests=("tests/contract/test_modal_provider.py",)),
    "warm_pool": Target("sandboxes/corral/sandboxes/warm_pool.py"),
    "stream_buffers": Target("sandboxes/corral/sandboxes/stream_buffers.py", (UNIT + "test_stream_buffers.py",)),
    "live_sandboxes": Target("sandboxes/corral/sandboxes/live_sandboxes.py", (UNIT + "test_sandbox_providers.py",)),
    "factory": Target("client/corral/client/factory.py", (UNIT + "test_client_factory.py",)),
    "session": Target("client/corral/client/session.py",
                      (INTEGRATION + "test_client_session.py", INTEGRATION + "test_many_hosts.py")),
    "client_episode": Target("client/corral/client/episode.py"),
    "environment_records": Target("client/corral/client/environment_records.py", (
        INTEGRATION + "test_environment_records.py", UNIT + "test_rollout_accounting.py")),
    "rollout_place": Target("client/corral/client/rollout_place.py", (
        UNIT + "test_rollout_accounting.py", INTEGRATION + "test_environment_records.py")),
    "runtime": Target("sandboxes/corral/env/runtime.py", (UNIT + "test_env_runtime.py",),
                      child_tests=(UNIT + "test_env_runtime.py",)),
}

# One replacement per operator site: enough to show a test notices the operator at all
# (selective mutation), at a tenth of the runs of every replacement.
KEPT_OPERATORS = {
    "NumberReplacer", "AddNot", "ReplaceUnaryOperator_Delete_Not", "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd", "ExceptionReplacer",
    "ZeroIterationForLoop", "ReplaceContinueWithBreak", "ReplaceBreakWithContinue",
    "RemoveDecorator", "ReplaceUnaryOperator_USub_UAdd",
    "ReplaceBinaryOperator_Add_Sub", "ReplaceBinaryOperator_Sub_Add",
    "ReplaceBinaryOperator_Mul_Div", "ReplaceBinaryOperator_Div_Mul",
    "ReplaceBinaryOperator_FloorDiv_Mul", "ReplaceBinaryOperator_Mod_FloorDiv",
    "ReplaceBinaryOperator_Pow_Mul", "ReplaceBinaryOperator_BitOr_BitAnd",
    "ReplaceBinaryOperator_BitAnd_BitOr", "ReplaceBinaryOperator_BitXor_BitOr",
    "ReplaceBinaryOperator_LShift_RShift", "ReplaceBinaryOperator_RShift_LShift",
    "ReplaceComparisonOperator_Eq_NotEq", "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Lt_LtE", "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE", "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Is_IsNot", "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceComparisonOperator_In_NotIn", "ReplaceComparisonOperator_NotIn_In",
}


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
        by_line = {path: {int(line): set(tests) for line, tests in lines.items()}
                   for path, lines in cached["tests_by_line"].items()}
        return Reach(tests_by_line=by_line, seconds=cached["seconds"])
    paths = [target.path for target in MODULES.values()]
    junit = workdir / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FAST_TESTS, *contract_tests(),
               *(f"--ignore={slow}" for slow in SLOW_TESTS), "--cov-context=test", "--cov-report=",
               f"--junitxml={junit}", *(f"--cov={REPO / folder}" for folder in {str(Path(p).parent) for p in paths})]
    print(f"coverage run of the fast tests ({' '.join(FAST_TESTS)}, {CONTRACT_TESTS} on {' '.join(CONTRACT_ON)}) ...",
          flush=True)
    environ = {**os.environ, "COVERAGE_FILE": str(workdir / "coverage")}
    if subprocess.run(command, cwd=REPO, env=environ, check=False).returncode != 0:
        sys.exit("the fast tests fail without any mutant: mend them first")
    reach = Reach(tests_by_line=lines_reached(workdir / "coverage", paths), seconds=test_seconds(junit))
    REACH_CACHE.write_text(json.dumps({
        "digest": digest, "seconds": reach.seconds,
        "tests_by_line": {path: {line: sorted(tests) for line, tests in lines.items()}
                          for path, lines in reach.tests_by_line.items()}}))
    return reach


def contract_tests() -> list[str]:
    """The node ids of the provider contract suite's runs on the providers of CONTRACT_ON."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                             CONTRACT_TESTS], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in listed.splitlines() if line.endswith(CONTRACT_ON)]


def code_digest() -> str:
    """A digest of every Python file of the source roots and the tests, and of which tests run."""
    files = sorted(file for root in ("protocol", "client", "server", "sandboxes", "training", "tests")
                   for file in (REPO / root).rglob("*.py"))
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
        by_line = {line: {context.rsplit("|", 1)[0] for context in contexts if context}
                   for line, contexts in contexts_by_line.items()}
        every_test = set().union(*by_line.values())
        reached[path] = {line: tests | every_test if "" in contexts_by_line[line] else tests
                         for line, tests in by_line.items()}
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
    return [spec for spec in specs
            if spec.operator_name.split("/")[-1] in KEPT_OPERATORS
            and not any(start <= tuple(spec.start_pos) < end for start, end in spans)
            and not is_bare_star(lines, spec)]


def is_bare_star(lines: list[str], spec: MutationSpec) -> bool:
    """The `*` that ends a signature's positional parameters, which cosmic-ray takes for a
    multiplication (and its `/` for another marker: the same calls still work)."""
    line, column = spec.start_pos
    text = lines[line - 1]
    return text[column:column + 1] == "*" and text[column + 1:].lstrip()[:1] in (",", ")")


def tests_for(spec: MutationSpec, target: Target, reach: Reach) -> list[str]:
    """The module's child_tests, then the tests that reach the mutant's lines: those of the
    module's own test files (and then the rest of them) up to OWN_TEST_SECONDS of their
    time, then the others up to TEST_SECONDS. Each group runs first
    the tests that run the rarely run lines of its function (a line run by every test, a
    session opened, is checked best by the few tests that take its unusual branches, not by
    the fastest), then the fastest."""
    by_line = reach.tests_by_line[target.path]
    tests = set().union(*(by_line.get(line, set()) for line in range(spec.start_pos[0], spec.end_pos[0] + 1)))
    if not tests:
        return list(target.child_tests)
    first, last = enclosing_function(REPO / target.path, spec.start_pos[0])
    rarity: dict[str, float] = dict.fromkeys(tests, 0.0)
    for line in range(first, last + 1):
        for test in tests & by_line.get(line, set()):
            rarity[test] += 1 / len(by_line[line])
    ranked = sorted(tests, key=lambda test: (-rarity[test], reach.seconds.get(test, TEST_SECONDS)))
    ranked = [test for test in ranked if not is_among(test, target.child_tests)]
    # Then the rest of the own tests: one may only read what the module built at import (a
    # class's signature), which coverage credits to no test.
    unreached = sorted((test for test in reach.seconds if is_among(test, target.own_tests) and test not in tests
                        and not is_among(test, target.child_tests)), key=lambda test: reach.seconds[test])
    own_tests = [test for test in ranked if is_among(test, target.own_tests)] + unreached
    others = [test for test in ranked if not is_among(test, target.own_tests)]
    return [*target.child_tests, *within(own_tests, OWN_TEST_SECONDS, reach), *within(others, TEST_SECONDS, reach)]


def is_among(test: str, tests: tuple[str, ...]) -> bool:
    """Whether the node id `test` is one of `tests` (node ids or whole files)."""
    return test in tests or test.split("::")[0] in tests


def within(tests: list[str], budget: float, reach: Reach) -> list[str]:
    """The first of `tests` whose seconds add up to at most `budget`, less any single test
    longer than the budget (a fuzz run that reaches the line by lasting long)."""
    chosen, seconds = [], 0.0
    for test in tests:
        if reach.seconds.get(test, budget) > budget:
            continue
        seconds += reach.seconds.get(test, budget)
        if seconds > budget:
            break
        chosen.append(test)
    return chosen


@functools.cache
def function_spans(path: Path) -> list[tuple[int, int]]:
    return sorted((node.lineno, node.end_lineno or node.lineno) for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def innermost_function(path: Path, line: int) -> tuple[int, int] | None:
    """The first and last lines of the innermost function holding `line`; None outside any."""
    return max(((first, last) for first, last in function_spans(path) if first <= line <= last), default=None)


def enclosing_function(path: Path, line: int) -> tuple[int, int]:
    """The lines of the innermost function holding `line`; the whole module outside any."""
    return innermost_function(path, line) or (1, len(path.read_text().splitlines()))


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
    diff = "\n".join(["--- mutation diff ---", *difflib.unified_diff(
        original.split("\n"), mutated.split("\n"), f"a/{spec.module_path}", f"b/{spec.module_path}", lineterm="")])
    if status is None:
        outcome, why = "timeout", f"the tests outlasted {timeout:.0f} s"
    else:
        outcome = PYTEST_OUTCOMES.get(status, "crashed")  # a signal's negative status, or another
        why = f"{len(tests)} tests, pytest exit status {status}"
    result = {"outcome": outcome, "why": why, "seconds": seconds, "diff": diff, **tests_ran(tests)}
    if outcome in INCONCLUSIVE:
        result["output"] = output[-2000:]
    return result


def run_tests(command: list[str], timeout: float) -> tuple[int | None, str]:
    """pytest's exit status (None: past `timeout`, its whole process group killed) and output."""
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # a stale .pyc must not hide a mutant
    process = subprocess.Popen(command, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output.decode("utf-8", errors="replace")
    return process.returncode, output.decode("utf-8", errors="replace")


def tests_ran(tests: list[str]) -> dict:
    """The test files a mutant's run used (and the conftest.py files above them), with a digest
    of their contents: the result holds while that digest does."""
    files = sorted({test.split("::")[0] for test in tests})
    return {"test_files": files, "tests_digest": tests_digest(files)}


def tests_digest(files: list[str]) -> str:
    conftests = {str(folder.relative_to(REPO) / "conftest.py") for file in files
                 for folder in (REPO / file).parents if folder.is_relative_to(REPO)
                 and (folder / "conftest.py").is_file()}
    digest = hashlib.sha256()
    for name in sorted({*files, *conftests}):
        path = REPO / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(gone)") + b"\0")
    return digest.hexdigest()


def still_holds(result: dict) -> bool:
    """Whether a cached result still holds: its tests are as they were when it ran (a result
    without any ran no test, and holds while its function does)."""
    if "test_files" not in result:
        return result["outcome"] == "survived" and result["why"].startswith("no test")
    return tests_digest(result["test_files"]) == result["tests_digest"]


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
        scope = hashlib.sha256("\n".join(lines[first - 1:last]).encode()).hexdigest()[:16]
        operator, place = spec.operator_name.split("/")[-1], 1
        while f"{operator}|{scope}|{place}" in keys:
            place += 1
        keys[f"{operator}|{scope}|{place}"] = spec
    return keys


def test_module(name: str, target: Target, reach_of: Callable[[], Reach], workdir: Path, *,
                again: bool, most: int | None) -> tuple[dict[str, dict], int]:
    """Run the module's mutants not run yet (at most `most` of them; with `again`, its survivors
    first, and only those unless `most` is given), in an order shuffled once for all: a run
    stopped early has run a uniform sample. The results so far, and the count
    of its mutants."""
    source = (REPO / target.path).read_bytes()
    mutants = keyed(target.path, mutants_of(target.path, workdir))
    cache = RESULTS / f"{name}.json"
    saved = json.loads(cache.read_text())["results"] if cache.exists() else {}
    changed = [key for key, result in saved.items() if not still_holds(result)]
    saved = {key: result for key, result in saved.items() if key not in changed}
    results = {key: {**saved[key], "line": spec.start_pos[0]} for key, spec in mutants.items() if key in saved}
    if again:  # tests other than those they ran may catch them now: try every mutant not killed
        results = {key: result for key, result in results.items() if result["outcome"] == "killed"}
    print(f"\n{name} ({target.path}): {len(mutants)} mutants, {len(results)} already run"
          + (f" ({len(changed)} more dropped: the tests they ran changed)" if changed else ""), flush=True)
    retry = [key for key in mutants if key in saved and key not in results]  # the survivors, with --again
    unrun = sorted((key for key in mutants if key not in saved), key=lambda key: hashlib.sha256(key.encode()).digest())
    to_run = retry + ([] if again and most is None else unrun[:most])  # --again alone: the survivors only
    for number, key in enumerate(to_run, 1):
        spec = mutants[key]
        reach = reach_of()  # measured once, when a mutant first needs it
        result = run_mutant(spec, tests_for(spec, target, reach), reach)
        results[key] = {"line": spec.start_pos[0], "operator": key.split("|")[0], **result}
        print(f"  {number}/{len(to_run)} line {spec.start_pos[0]} {results[key]['operator']}: "
              f"{result['outcome']} ({result['why']}, {result.get('seconds', 0)} s)", flush=True)
        cache.write_text(json.dumps({"results": results}, indent=1))
        if (REPO / target.path).read_bytes() != source:
            sys.exit(f"{target.path} was not restored after a mutant: stop and check it")
    return results, len(mutants)


def report(name: str, target: Target, results: dict[str, dict], total: int) -> str:
    """The module's score (killed among the mutants a test judged) and its survivors, those of a
    kind that cannot change behaviour set apart with the reason (and left out of the second
    score); then the mutants no test judged (not run, crashed, timed out), each with why."""
    source = (REPO / target.path).read_text().splitlines()
    # cosmic-ray fails to make a few mutants (an ExceptionReplacer on a tuple of dotted names):
    # not a mutant, so left out of the scores, and counted below them.
    unmade = [result for result in results.values() if result["outcome"] == "error"]
    results = {key: result for key, result in results.items() if result["outcome"] != "error"}
    inconclusive = sorted((result for result in results.values() if result["outcome"] in INCONCLUSIVE),
                          key=lambda result: result["line"])
    judged = [result for result in results.values() if result["outcome"] not in INCONCLUSIVE]
    if not results:
        title = f"# {name}: not run yet ({total} mutants; `--most N {name}` runs a random sample of them)"
        (RESULTS / f"{name}.md").write_text(title + "\n")
        return title[2:]
    survivors = sorted((result for result in judged if result["outcome"] != "killed"), key=lambda result: result["line"])
    whys = [equivalence(result, source[result["line"] - 1], target.path) for result in survivors]
    unexplained = whys.count(None)
    killed, counted = len(judged) - len(survivors), len(judged) - len(survivors) + unexplained
    title = (f"# {name}: {killed}/{len(judged)} mutants killed ({killed / max(len(judged), 1):.0%}); "
             f"{killed}/{counted} ({killed / max(counted, 1):.0%}) less {len(survivors) - unexplained} "
             "that cannot change behaviour")
    if inconclusive:
        kinds = ", ".join(f"{count} {kind}" for kind in INCONCLUSIVE
                          if (count := sum(result["outcome"] == kind for result in inconclusive)))
        title += f"; {len(inconclusive)} judged by no test ({kinds}), out of the scores"
    if len(results) < total:
        title += f" (a random sample: {len(results)} of its {total} mutants run)"
    lines = [title, "", f"`{target.path}`; survivors below, each with its diff.", ""]
    if unmade:
        where = ", ".join(str(result["line"]) for result in unmade)
        lines += [f"cosmic-ray could not make {len(unmade)} mutant(s) (lines {where}): left out of the scores.", ""]
    for result, why in zip(survivors, whys, strict=True):
        lines += [f"## line {result['line']}: {result['operator']} ({result['outcome']}: {result['why']})",
                  *([f"Cannot change behaviour: {why}."] if why else []),
                  "", "```diff", result.get("diff", "").strip(), "```", ""]
    if inconclusive:
        lines += ["# Judged by no test", "",
                  ("pytest could not collect or run the tests (exit status 2 to 5), they crashed, or they outlasted "
                  "their timeout: no test failed on these mutants, so they count neither way."), ""]
    for result in inconclusive:
        output = "\n".join(result.get("output", "").strip().splitlines()[-10:])
        lines += [f"## line {result['line']}: {result['operator']} ({result['outcome']}: {result['why']})",
                  "", "```diff", result.get("diff", "").strip(), "```", "", "```text", output, "```", ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines))
    return title[2:]


# Reasons several survivors share.
QUOTE_DEFAULT = "how much of an env's stderr an error quotes by default: a character more or less is as good"
AGENT_STOPPED = "it only spares a second verifier the stop of the agent's processes, which the first one's left gone"
NEVER_STDIN = "the descriptor is never 0, the server's stdin, which stays open for the server's life"
RANDOM_NAME = "the length of a random name: a hex digit more or less names them apart as well"
FIRST_BYTE_NEWLINE = ("it misses a newline only as the buffer's first byte, an empty line, which then comes as leading "
                      "whitespace of the next line, which JSON's decoder skips (as the server skips a line that is "
                      "not JSON)")

# Survivors read and found harmless one by one: (module path, the line's code) -> why.
EXPLAINED = {
    ("server/corral/server/sessions.py", "if self._reaper is not None:"):
        "the serving loop ends under asyncio.run, which cancels a reaper left running; close_all "
        "cancels it first only so that it releases no session while close_all does",
    ("client/corral/client/session.py",
     "def __init__(self, url: str, *, token: str | None = None, keepalive_s: float = 20.0):"):
        "a default keepalive period: a second more or less keeps a socket alive as well",
    ("sandboxes/corral/sandboxes/local_sandbox.py", "def stderr_tail(self, max_chars: int = 4000) -> str:"): QUOTE_DEFAULT,
    ("sandboxes/corral/sandboxes/local_sandbox.py", "self.verifications = 0"):
        "the count only names each verification's folder (verify-1, verify-2, ...); any start names them apart",
    ("sandboxes/corral/sandboxes/local_sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    ("sandboxes/corral/sandboxes/local_sandbox.py", "self._stderr = -1"):
        "the mark of a closed stderr: nothing reads a sandbox's tail once it is closed (the episode and the "
        "warm pool quote it before), and a second close returns at once",
    ("sandboxes/corral/sandboxes/local_sandbox.py", "if self._stderr >= 0:"): NEVER_STDIN,
    ("sandboxes/corral/sandboxes/local.py", "if self._lock >= 0 or not self.named:"): NEVER_STDIN,
    ("sandboxes/corral/sandboxes/local.py", "if self._lock >= 0:"): NEVER_STDIN,
    ("sandboxes/corral/sandboxes/local_sandbox.py",
     'return os.pread(self._stderr, size - start, start).decode("utf-8", errors="replace")'):
        "a read from `start` stops at the file's end: asking for more bytes than are left reads the same",
    ("sandboxes/corral/sandboxes/local_files.py", "os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)"):
        "`& 0o101` differs only for a file that others may run and its owner may not",
    ("sandboxes/corral/sandboxes/local_files.py", "target = shared / f\"{spec.env_name}-{uuid.uuid4().hex[:8]}\""):
        RANDOM_NAME,
    ("sandboxes/corral/sandboxes/local.py",
     "def __init__(self, *, instance: str | None = None, warm_pool: int = 0) -> None:"):
        "WarmPools keeps no pool for any size below 1: -1 is as good as 0",
    ("sandboxes/corral/env/runtime.py", "sys.path[:0] = [os.path.abspath(p) for p in args.path] + [os.getcwd()]"):
        "run as `python -m corral.env`, the first entry of sys.path is the working folder, which the list put "
        "in its place (`[:1]`) holds too",
    ("sandboxes/corral/sandboxes/docker_sandbox.py",
     'api.attach_socket, container_id, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}'):
        "the engine reads each of attach's flags as true or false: 2 is as true as 1",
    ("sandboxes/corral/sandboxes/modal_sandbox.py", "def stderr_tail(self, max_chars: int = 4000) -> str:"):
        QUOTE_DEFAULT,
    ("sandboxes/corral/sandboxes/modal_sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    ("sandboxes/corral/sandboxes/modal_sandbox.py", "self._stderr_size = 0"):
        "the count of stderr characters kept, one off: the trim keeps a character more or less of STDERR_KEEP",
    ("sandboxes/corral/sandboxes/modal_sandbox.py", 'while (end := self._stdout.find(b"\\n", scanned)) < 0:'):
        FIRST_BYTE_NEWLINE,
    ("sandboxes/corral/sandboxes/modal_sandbox.py", "for reader in self._readers:"):
        "the readers end on their own a moment later: the termination that on_close starts ends both streams",
    ("sandboxes/corral/sandboxes/modal_sandbox.py", "scanned = 0"): FIRST_BYTE_NEWLINE,
    ("sandboxes/corral/sandboxes/modal_sandbox.py",
     "timeout_s: float, max_output_chars: int = 20_000) -> CommandResult:"):
        "how much of a verifier's output is kept by default: a character more or less is as good",
    ("sandboxes/corral/sandboxes/docker_sandbox.py", "self._agent_stopped = True"): AGENT_STOPPED,
    ("sandboxes/corral/sandboxes/docker_sandbox.py",
     ("tail = f\"{session}-{episode}\" if session and episode else "
      "f\"{labels.get('corral.purpose', 'env')}-{uuid.uuid4().hex[:8]}\"")):
        "the server labels an episode's container with both its session and its episode, or neither",
    ("sandboxes/corral/sandboxes/docker_sandbox.py",
     "return _safe_name(f\"corral-{instance}-{env_name}-warm-{uuid.uuid4().hex[:8]}\")"): RANDOM_NAME,
    ("client/corral/client/session.py", "self.url = urls[0]"):
        "with several hosts the first reset picks the host and moves there; before it, a request finds no "
        "episode on any host and gets the same answer from each",
    ("client/corral/client/session.py", "if self._hosts is not None and not isinstance(error, ReplyTimeout):"):
        "marking a host lost only makes the next pick ask its health afresh: a dead host picked on stale news "
        "fails its socket at the reset, is marked lost there and left for another (the run ends the same, "
        "one attempt later); a slow host marked lost answers the fresh ask and is picked as before",
}


def equivalence(result: dict, line: str, path: str) -> str | None:
    """Why a surviving mutant cannot change what the code does: a kind that never can, or one
    read and explained in EXPLAINED."""
    code = line.split("  # ")[0].strip()  # a line's code, without its comment
    if (path, code) in EXPLAINED:
        return EXPLAINED[path, code]
    if code.startswith("assert "):
        return "an assert that only narrows a type for the type checker"
    if re.match(r"@dataclass\(.*frozen=True", code) and result["operator"] == "ReplaceTrueWithFalse" \
            and "frozen=False" in result.get("diff", ""):
        return "nothing assigns to the dataclass's fields, frozen or not"
    if result["operator"] == "NumberReplacer" and re.match(r"[A-Z][A-Z0-9_]* = ", code):
        return "a tuning constant: a value one off is as good"
    if result["operator"] in BOUNDARY_FLIPS and re.search(r"monotonic\(\)|\bnow\b|_time_left\(\)", code):
        return "`<` for `<=` on a reading of a float clock, which never lands on the bound itself"
    if result["operator"] == "NumberReplacer" and "_time_left() <= 0" in code and "_time_left() <= 1" in result.get("diff", ""):
        return ("the agent's time budget ends a second early: a tuning constant of sorts, as budgets are minutes "
                "(a test timing a call within a budget's last second would fail on a busy machine)")
    return None


BOUNDARY_FLIPS = {f"ReplaceComparisonOperator_{flip}" for flip in ("Lt_LtE", "LtE_Lt", "Gt_GtE", "GtE_Gt")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=f"some of: {', '.join(MODULES)} (default: all)")
    parser.add_argument("--again", action="store_true", help="run the survivors of the last run again (after mending tests); with --most N, N new ones too")
    parser.add_argument("--most", type=int, metavar="N",
                        help="run at most N more mutants of each module (a random sample; a later run goes on)")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    if unknown := sorted(set(names) - set(MODULES)):
        parser.error(f"no module named {', '.join(unknown)}; pick from {', '.join(MODULES)}")
    os.environ["CI"] = "true"  # a test that would skip fails instead, as in CI
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped, it still puts back the mutated file
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corral-mutation-") as scratch:
        workdir = Path(scratch)
        reach_of = functools.cache(lambda: measure_reach(workdir))
        summaries = [report(name, MODULES[name], *test_module(name, MODULES[name], reach_of, workdir, again=args.again,
                                                              most=args.most))
                     for name in names]
    print("\n" + "\n".join(summaries))


if __name__ == "__main__":
    main()
