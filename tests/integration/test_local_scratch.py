"""What a local episode may hold of this machine's memory outside its processes' maps (issue 38).

Each process of a local episode maps at most the env's `memory_mb` (RLIMIT_AS), but memory a
file holds is no process's map: bubblewrap's tmpfs (/tmp, /var/tmp, /dev/shm, and the root and
/dev it builds) were sized by bytes alone or not at all, so empty files held the kernel's
memory without bound and the three folders held three shares; a memfd, a SysV shared memory
segment or message queue holds memory once unmapped. Attacks of those classes, by the agent.
"""

from __future__ import annotations

import shutil
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


@pytest.fixture(scope="module")
def small_shellfix(tmp_path_factory):
    bundle = shutil.copytree(BUNDLES / "shellfix", tmp_path_factory.mktemp("memory") / "shellfix")
    env_toml = bundle / "envs" / "shellfix" / "env.toml"
    env_toml.write_text(env_toml.read_text().replace("memory_mb = 512", f"memory_mb = {MEMORY_MB}"))
    yield from serving(bundle, sandbox="local")


MEMORY_MB = 96
# 128 MB (past the env's MEMORY_MB) in each facility that holds memory no process maps, 16 MB
# (or a queue's or a semaphore set's most) at a time: how many MB each held before a refusal.
UNMAPPED = """
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
held, chunk = {}, bytes(16 << 20)

def hold(name, one, size_mb):
    held[name] = 0
    try:
        while held[name] < 128:
            one()
            held[name] += size_mb
    except OSError as error:
        print(name, "refused", error.strerror)

def failed():
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

kept = []
def memfd():
    fd = os.memfd_create("held")
    os.write(fd, chunk)
    kept.append(fd)

def segment():
    key = libc.shmget(IPC_PRIVATE, len(chunk), IPC_CREAT | 0o600)
    if key < 0:
        failed()
    at = libc.shmat(key, None, 0)
    if at == ctypes.c_void_p(-1).value:
        failed()
    ctypes.memset(at, 1, len(chunk))
    libc.shmdt(ctypes.c_void_p(at))

class Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 8192)]

def queue():
    key = libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)
    if key < 0:
        failed()
    for _ in range(2):  # a queue holds 16 KB
        if libc.msgsnd(key, ctypes.byref(Message(1)), 8192, 0o4000) < 0:  # IPC_NOWAIT
            failed()

def semaphores():
    if libc.semget(IPC_PRIVATE, 32000, IPC_CREAT | 0o600) < 0:
        failed()

hold("memfd", memfd, 16)
hold("shm", segment, 16)
hold("msg", queue, 1 / 64)
hold("sem", semaphores, 2)
print(*(f"{name}={round(mb)}" for name, mb in held.items()))
"""


def test_memory_no_process_maps_stops_at_the_env_s_bound(small_shellfix):
    said, ended = attack(small_shellfix, UNMAPPED)

    held = dict(pair.split("=") for pair in said.splitlines()[-2].split())
    assert set(held) == {"memfd", "shm", "msg", "sem"}, said
    assert all(int(mb) <= MEMORY_MB for mb in held.values()), said
    assert ended.status == "scored", ended.reason
