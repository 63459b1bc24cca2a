"""The local sandbox's disk quota (sandboxes/corral/sandboxes/local/quota.py): a server running
as root mounts a tmpfs of `scratch_mb` over each episode's work folder, so an agent cannot
fill this machine's disk through it, nor its tests through each verification's folder. Played
with shellfix, its share made 4 MB (the attacks write 64 and 200 MB: without the quota, all of
it lands on the host's disk).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.attacks import BUG, FILLS_THE_VERIFIER, TASK, bash, play, write
from tests.conftest import BUNDLES, serving, skip_or_fail_under_ci
from tests.wire import called, opened, ws

pytestmark = pytest.mark.usefixtures("no_leftover_env_processes")

WRITE_64_MB = "dd if=/dev/zero of=big bs=1M count=64 2>&1 | head -n 1; echo wrote $(du -sm big | cut -f1) MB in $PWD"


@pytest.fixture(scope="module")
def small_shellfix(tmp_path_factory):
    if os.geteuid() != 0:
        skip_or_fail_under_ci("only a server running as root can mount the quota (CI runs the tests as root)")
    bundle = shutil.copytree(BUNDLES / "shellfix", tmp_path_factory.mktemp("quota") / "shellfix")
    env_toml = bundle / "envs" / "shellfix" / "env.toml"
    env_toml.write_text("scratch_mb = 4\n" + env_toml.read_text())
    yield from serving(bundle, sandbox="local", max_concurrent_envs=2)


def mounted(folder: str) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return [line for line in mounts if folder in line.split()[4]]


def test_writing_past_the_quota_fails_and_the_episode_scores_0(small_shellfix):
    with ws(small_shellfix) as socket:
        opened(socket, task_id=TASK)
        said = called(socket, "bash", command=WRITE_64_MB).result
        ended = called(socket, "end_turn", response="done")

    assert "No space left on device" in said, said
    wrote, workdir = re.search(r"wrote (\d+) MB in (\S+)", said).groups()
    assert int(wrote) <= 4, said
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason
    folder = str(Path(workdir).parent)
    assert not mounted(folder) and not os.path.exists(folder)


def test_empty_files_past_the_quota_are_refused_too(small_shellfix):
    # 4 MB hold 4,096 files and folders: each costs the kernel's memory, whatever its size.
    with ws(small_shellfix) as socket:
        opened(socket, task_id=TASK)
        said = called(
            socket, "bash", command="mkdir many && cd many && seq 10000 | xargs touch 2>&1 | head -n 1; ls | wc -l"
        )
        ended = called(socket, "end_turn", response="done")

    assert "No space left on device" in said.result and int(said.result.splitlines()[1]) < 4096, said.result
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_what_the_tests_write_is_bounded_too(small_shellfix):
    # The tests import the agent's module, which writes 200 MB where they run and in their TMPDIR.
    ended = play(small_shellfix, [write("batching.py", FILLS_THE_VERIFIER + BUG)])

    output = ended.metadata["verifier_output"]["tests"]
    assert re.search(r"\.: \[Errno 28\] No space left on device; /\S+: \[Errno 28\] No space left", output), output
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


def test_the_reference_fix_with_a_file_beside_it_still_scores_1_within_the_quota(small_shellfix):
    ended = play(small_shellfix, [bash("dd if=/dev/zero of=filler bs=1M count=1 2>/dev/null; echo ok")], fixed=True)

    assert (ended.status, ended.reward) == ("scored", 1.0), ended.reason


def test_the_env_s_stderr_cannot_grow_past_the_share(small_shellfix):
    # A tool's error quotes the agent's argument, and the env prints it on its stderr, a file of
    # the server's on this machine's disk: 900 KB a call, ten calls past the 4 MB share.
    with ws(small_shellfix) as socket:
        opened(socket, task_id=TASK)
        stderr = Path(called(socket, "bash", command="pwd").result.splitlines()[0]).parent / "stderr"
        for _ in range(10):
            said = called(socket, "read_file", path="x" * 900_000)
            if said.done:  # the env could not write its stderr, and died of it
                break
            assert stderr.stat().st_size <= 4 << 20
        ended = said if said.done else called(socket, "end_turn", response="done")

    assert ended.reward == 0.0 and ended.status in ("scored", "failed"), (ended.status, ended.reason)
