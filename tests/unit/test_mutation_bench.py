"""bench/mutation.py judges a mutant by what its tests say: killed only when a test fails on
it, inconclusive (out of the scores) when pytest could not collect or run them, and a cached
result holds only while the tests it ran are as they were, down to the test modules they import."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))  # its parts import each other as scripts beside them do
mutation = importlib.import_module("mutation")
mutation_cache = importlib.import_module("mutation_cache")
mutation_runs = importlib.import_module("mutation_runs")
mutation_survivors = importlib.import_module("mutation_survivors")

TESTS = {
    "killed": "def test_it():\n    assert 1 + 1 == 3\n",
    "survived": "def test_it():\n    assert 1 + 1 == 2\n",
    "not run": "import a_module_no_one_wrote\n\ndef test_it():\n    pass\n",  # collection error: status 2
}


@pytest.mark.parametrize("outcome", TESTS)
def test_a_mutant_is_killed_only_when_a_test_fails_on_it(tmp_path: Path, outcome: str):
    test = tmp_path / "test_case.py"
    test.write_text(TESTS[outcome])
    status, output = mutation_runs.run_tests(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], timeout=60
    )
    assert mutation_runs.outcome_of(status) == outcome, output


def test_tests_pytest_could_not_run_crashed_or_timed_out_judge_no_mutant():
    # 3 internal error, 4 usage error, 5 no tests collected; a signal; past the timeout
    assert [mutation_runs.outcome_of(status) for status in (3, 4, 5, -9, None)] == [
        "not run",
        "not run",
        "not run",
        "crashed",
        "timeout",
    ]
    assert {"not run", "crashed", "timeout"} <= set(mutation_runs.INCONCLUSIVE)


def test_the_score_counts_only_mutants_a_test_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    module = tmp_path / "module.py"
    module.write_text("def f(x):\n    return x + 1\n")
    monkeypatch.setattr(mutation, "RESULTS", tmp_path)
    results = {
        key: {"line": 2, "operator": "ReplaceBinaryOperator_Add_Sub", "outcome": outcome, "why": "-"}
        for key, outcome in [("a", "killed"), ("b", "survived"), ("c", "not run"), ("d", "not run"), ("e", "timeout")]
    }
    title = mutation.report("module", mutation.Target(str(module)), results, total=5)
    assert title.startswith("module: 1/2 mutants killed (50%)")
    assert "3 judged by no test (2 not run, 1 timeout), out of the scores" in title


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A test suite: a test file, the conftest.py above it, a module it imports (which imports
    another, relatively), one it imports inside a test, and one it does not import at all."""
    files = {
        "tests/__init__.py": "",
        "tests/conftest.py": "FIXTURE = 1\n",
        "tests/unit/__init__.py": "",
        "tests/unit/test_it.py": "from tests.wire import call\n\ndef test_it():\n"
        "    from tests.unit import fake\n    assert call() and fake\n",
        "tests/wire.py": "from .frames import frame\n\ndef call():\n    return frame\n",
        "tests/frames.py": "frame = 1\n",
        "tests/unit/fake.py": "",
        "tests/other.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "edited", ["tests/unit/test_it.py", "tests/conftest.py", "tests/wire.py", "tests/frames.py", "tests/unit/fake.py"]
)
def test_a_cached_result_is_dropped_when_the_tests_it_ran_change(suite: Path, edited: str):
    result = {"outcome": "killed", **mutation_cache.tests_ran(["tests/unit/test_it.py::test_it"], suite)}
    assert mutation_cache.still_holds(result, suite)
    with (suite / edited).open("a") as file:
        file.write("# edited\n")
    assert not mutation_cache.still_holds(result, suite)


def test_a_cached_result_holds_while_only_other_tests_change(suite: Path):
    result = {"outcome": "survived", **mutation_cache.tests_ran(["tests/unit/test_it.py::test_it"], suite)}
    (suite / "tests/other.py").write_text("x = 2\n")
    assert mutation_cache.still_holds(result, suite)


def test_a_decorator_removed_from_a_protocols_member_cannot_change_behaviour(tmp_path: Path):
    module = tmp_path / "interfaces.py"
    module.write_text(
        "from typing import Protocol\n\n\nclass Sized(Protocol):\n    @property\n"
        "    def size(self) -> int: ...\n\n\nclass Box:\n    @property\n"
        "    def size(self) -> int:\n        return 1\n"
    )
    removed = [{"operator": "RemoveDecorator", "line": line} for line in (5, 10)]
    whys = [mutation_survivors.equivalence(result, "    @property", str(module)) for result in removed]
    assert whys[0] and "Protocol" in whys[0]
    assert whys[1] is None  # a real class's property: removing it changes what `.size` is
