"""shellfix's test runner where Landlock is refused: it fails closed.

Its repository worker hides the tests from the agent's code with Landlock; where the kernel
lacks it, or a seccomp profile refuses its calls, it used to print a warning and run the
agent's code anyway, with the tests readable (issue 38). Here the runner runs on the reference
fix under bubblewrap with a seccomp filter that answers Landlock's first call ENOSYS, as a
kernel without it does: the tests must fail, saying why.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BUNDLES, skip_or_fail_under_ci

SHELLFIX = BUNDLES / "shellfix"
TASK = "shellfix-batching"
LANDLOCK_CREATE_RULESET = 444  # the same number on x86-64 and arm64


def without_landlock() -> int:
    """A file descriptor holding a seccomp program (for `bwrap --seccomp`) that answers
    landlock_create_ruleset ENOSYS and allows everything else."""
    ops = [(0x20, 0, 0, 0), (0x15, 0, 1, LANDLOCK_CREATE_RULESET), (0x06, 0, 0, 0x50000 | errno.ENOSYS)]
    program = b"".join(struct.pack("=HBBI", *op) for op in [*ops, (0x06, 0, 0, 0x7FFF0000)])
    fd = os.memfd_create("no-landlock")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@pytest.fixture
def verifier_files(tmp_path: Path) -> tuple[Path, Path]:
    """The verifier's folder (the runner and the task's tests) and the fixed repository."""
    files, repo = tmp_path / "files", tmp_path / "repo"
    shutil.copytree(SHELLFIX / "tests" / "runner", files)
    shutil.copytree(SHELLFIX / "tests" / TASK, files, dirs_exist_ok=True)
    shutil.copytree(SHELLFIX / "repos" / TASK, repo)
    fix = json.loads((SHELLFIX / "solutions" / f"{TASK}.json").read_text())
    source = repo / fix["path"]
    source.write_text(source.read_text().replace(fix["old"], fix["new"]))
    return files, repo


def run_tests(files: Path, repo: Path, *, landlock: bool) -> subprocess.CompletedProcess[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        skip_or_fail_under_ci("bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
    seccomp = without_landlock()
    try:
        return subprocess.run(
            [bwrap, "--die-with-parent", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
            + ([] if landlock else ["--seccomp", str(seccomp)])
            + ["--chdir", str(repo), "--", "python3", "-I", "-B", str(files / "run_tests.py")],
            pass_fds=(seccomp,),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(seccomp)


def test_the_fixed_repository_passes_where_landlock_hides_the_tests(verifier_files):
    ran = run_tests(*verifier_files, landlock=True)

    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_where_landlock_is_refused_the_repository_s_code_never_runs_and_the_tests_fail(verifier_files):
    ran = run_tests(*verifier_files, landlock=False)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Landlock is refused here" in ran.stdout, ran.stdout
