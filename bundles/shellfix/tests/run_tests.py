"""Run one task's hidden tests against the repository in the working directory.

The command verifier copies this file and the task's `test_*.py` into a fresh folder after
the agent's last turn and runs `python3 -I -B run_tests.py` in the repository's folder. Exit
status 0 means every test passed. Whatever the agent left in the repository cannot stand in
for these tests: they are loaded by path from this folder only (a `tests/` or `test_*.py` of
the agent's is never looked at), `-I` keeps the working directory and PYTHONPATH off the
import path, and the repository is appended after the standard library, so a file of its
named like a standard module (`unittest.py`) does not replace it. A SystemExit raised by the
repository's code fails the run instead of ending it with its status.
"""

import importlib.util
import os
import sys
import traceback
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run() -> bool:
    sys.path.append(os.getcwd())
    suite = unittest.TestSuite()
    for path in sorted(HERE.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    return result.wasSuccessful() and result.testsRun > 0


if __name__ == "__main__":
    try:
        passed = run()
    except BaseException:  # noqa: BLE001 - an import failing or exiting is a failed run
        traceback.print_exc(file=sys.stdout)
        passed = False
    sys.stdout.flush()
    os._exit(0 if passed else 1)
