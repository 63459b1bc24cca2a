"""The fast tier (`pytest -m fast`) stays fast by what it holds, not by a clock: its tests are
in the fast folders, none uses a server or Docker or carries an opt-out marker, `-m fast`
leaves none of them out by skipping a folder or module, and collecting them imports neither
TRL nor torch (tests/conftest.py gives the marker)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import FAST_FOLDERS, FAST_TIMEOUT_S, NOT_FAST_MARKERS, REPO, SLOW_FIXTURES

# Collects the suite with pytest's arguments from argv; prints each test that carries the
# `fast` marker and the heavy packages that collecting imported.
COLLECT = """
import json, sys, pytest

class Tier:
    def pytest_collection_finish(self, session):
        self.tests = [{"id": item.nodeid, "fixtures": list(getattr(item, "fixturenames", ())),
                       "markers": sorted({mark.name for mark in item.iter_markers()}),
                       "timeout": (item.get_closest_marker("timeout") or pytest.mark.timeout(None).mark).args[0]}
                      for item in session.items if item.get_closest_marker("fast")]

tier = Tier()
code = pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only", *sys.argv[1:]], plugins=[tier])
print(json.dumps({"code": int(code), "tests": tier.tests,
                  "heavy": [name for name in ("trl", "torch", "selenium") if name in sys.modules]}))
"""


def collect(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, *args], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_test_outside_the_fast_folders_is_marked_fast():
    """`-m fast` does not collect the other folders: a `fast` marker there would be a test lost."""
    marked = [
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if path.relative_to(REPO / "tests").parts[0] not in FAST_FOLDERS and "mark.fast" in path.read_text()
    ]
    assert marked == [], f"tests marked fast outside tests/{{{','.join(sorted(FAST_FOLDERS))}}}: {marked}"


@pytest.mark.slow  # collects the fast folders twice, TRL and torch with them
@pytest.mark.timeout(900)  # two collections beside a loaded machine's other work
def test_the_fast_tier_holds_only_tests_that_start_nothing_slow():
    everything = collect(*(f"tests/{folder}" for folder in sorted(FAST_FOLDERS)))
    fast = collect("-m", "fast")
    assert everything["code"] == 0 and fast["code"] == 0
    marked = {test["id"] for test in everything["tests"]}
    assert marked, "no test carries the fast marker: tests/conftest.py gives it to tests/unit"
    assert {test["id"] for test in fast["tests"]} == marked, (
        "`pytest -m fast` skips a folder or module (tests/conftest.py's FAST_FOLDERS, NOT_FAST_MODULES) "
        "that holds a test marked fast"
    )
    wrong = []
    for test in everything["tests"]:
        slow = SLOW_FIXTURES & set(test["fixtures"]) | NOT_FAST_MARKERS & set(test["markers"])
        if slow:
            wrong.append(f"{test['id']}: {sorted(slow)}")
    assert wrong == [], "tests in the fast tier that are not fast (drop their `fast` marker):\n" + "\n".join(wrong)
    assert fast["heavy"] == [], (
        f"collecting the fast tier imports {fast['heavy']}: mark the unit module that imports it as it loads "
        "`slow` or `trl` and add it to NOT_FAST_MODULES in tests/conftest.py"
    )


@pytest.mark.slow  # collects the fast tier in a process of its own
def test_under_dash_m_fast_every_test_gets_the_tiers_timeout_over_its_modules():
    """A fast test waiting on what the machine lacks fails after FAST_TIMEOUT_S, not 300 s or
    the 600 s the provider contract's module gives its tests in the full suite."""
    fast = collect("-m", "fast")
    longer = [test["id"] for test in fast["tests"] if test["timeout"] != FAST_TIMEOUT_S]
    assert fast["tests"] and longer == [], f"fast tests without the tier's {FAST_TIMEOUT_S} s timeout: {longer[:5]}"
