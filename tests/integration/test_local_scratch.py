"""What a local episode may hold of this machine's memory outside its processes' maps (issue 38).

Each process of a local episode maps at most the env's `memory_mb` (RLIMIT_AS), but memory a
file holds is no process's map: bubblewrap's tmpfs (/tmp, /var/tmp, /dev/shm, and the root and
/dev it builds) were sized by bytes alone or not at all, so empty files held the kernel's
memory without bound and the three folders held three shares; a memfd, a SysV shared memory
segment or message queue holds memory once unmapped. Attacks of those classes, by the agent.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from corral.sandboxes.base import INODES_PER_MB, SandboxSpec
from tests.attacks import TASK
from tests.conftest import BUNDLES, serving
from tests.wire import called, opened, ws

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("no_leftover_env_processes", "as_root")]

SCRATCH_MB = next(field.default for field in fields(SandboxSpec) if field.name == "scratch_mb")  # shellfix's


@pytest.fixture(scope="module")
def shellfix():
    yield from serving(BUNDLES / "shellfix", sandbox="local")


def attack(server, script: str) -> tuple[str, object]:
    """Run `script` (Python) as the agent in shellfix's env; what it printed and the ending."""
    with ws(server) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="attack.py", content=script)
        said = called(agent, "bash", command="python3 attack.py").result
        ended = called(agent, "end_turn", response="done")
    return said, ended


# Empty files, one folder at a time, until the kernel refuses: how many it took.
INODES = """
import os
for folder in ("/tmp", "/var/tmp", "/dev/shm"):
    made = 0
    try:
        while made < {most}:
            os.close(os.open(f"{{folder}}/f{{made}}", os.O_CREAT | os.O_WRONLY, 0o600))
            made += 1
    except OSError as error:
        print(folder, "refused", error.strerror)
    print(folder, made)
"""


def test_empty_files_in_the_private_tmp_folders_stop_at_the_env_s_share_of_inodes(shellfix):
    bound = SCRATCH_MB * INODES_PER_MB
    said, ended = attack(shellfix, INODES.format(most=bound + 2000))

    made = {line.split()[0]: int(line.split()[1]) for line in said.splitlines() if line.split()[-1].isdigit()}
    assert set(made) == {"/tmp", "/var/tmp", "/dev/shm"}, said
    assert sum(made.values()) <= bound, said  # one share for the three, as docker's one scratch
    assert ended.status == "scored", ended.reason


# Bytes in each folder, 8 MB at a time, until the kernel refuses: how many MB it took in all.
BYTES = """
import os
total = 0
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/", "/dev"):
    try:
        with open(f"{folder}/fill", "wb") as out:
            for _ in range(48):
                out.write(bytes(8 << 20))
                out.flush()
                total += 8
    except OSError as error:
        print(folder, "refused", error.strerror)
print("total", total)
"""


def test_bytes_in_every_folder_the_sandbox_makes_stop_at_one_share(shellfix):
    said, ended = attack(shellfix, BYTES)

    total = int(said.split("total")[-1].split()[0])
    assert total <= SCRATCH_MB, said
    assert ended.status == "scored", ended.reason
