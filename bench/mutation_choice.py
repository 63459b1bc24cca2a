"""Which tests a mutant runs: those that reach its line, the module's own first, the ones
that run the rare lines of its function before the fastest, within a budget of seconds."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from cosmic_ray.work_item import MutationSpec

from mutation_reach import Reach
from mutation_targets import OWN_TEST_SECONDS, REPO, TEST_SECONDS, Target


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
    unreached = sorted(
        (
            test
            for test in reach.seconds
            if is_among(test, target.own_tests) and test not in tests and not is_among(test, target.child_tests)
        ),
        key=lambda test: reach.seconds[test],
    )
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
    return sorted(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def innermost_function(path: Path, line: int) -> tuple[int, int] | None:
    """The first and last lines of the innermost function holding `line`; None outside any."""
    return max(((first, last) for first, last in function_spans(path) if first <= line <= last), default=None)


def enclosing_function(path: Path, line: int) -> tuple[int, int]:
    """The lines of the innermost function holding `line`; the whole module outside any."""
    return innermost_function(path, line) or (1, len(path.read_text().splitlines()))
