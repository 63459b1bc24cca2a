"""What a local episode of a root server leaves on the host, and what it may take of it (issue 38).

With a root server and bubblewrap the agent's uid is a host uid, reused lowest-first, so what
the kernel keeps per uid (a keyring) reached a later episode given the same uid; two servers
with different TMPDIRs locked uids in different folders, handed out the same uid, and the
first take of a uid killed every process of it, the other server's episode among them; and
neither the agent's processes nor the verifier's had a memory bound (a repository module
allocated 1.5 GB in the verifier). Attacks of the same classes, neighbours of those seen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.sandboxes.local.procs import UIDS_DIR, as_uid
from tests.attacks import BUG, TASK, play, write
from tests.conftest import BUNDLES, serving
from tests.wire import called, opened, ws

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("no_leftover_env_processes", "as_root")]


@pytest.fixture
def shellfix():
    # Its own server: its episodes take the lowest free uids, so the second gets the first's.
    yield from serving(BUNDLES / "shellfix", sandbox="local", max_concurrent_envs=2)


# The user session keyring (@us) is kept per uid by the kernel, as the user keyring (@u) is.
KEYS = """
import ctypes, errno, os, sys
KEYCTL, ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[os.uname().machine]
USER_SESSION, SEARCH, READ = -5, 10, 11
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "store":
    key = libc.syscall(ADD_KEY, b"user", b"note", b"the answer is 42", 16, USER_SESSION)
    print("stored", key, errno.errorcode.get(ctypes.get_errno(), "") if key < 0 else "")
else:
    key = libc.syscall(KEYCTL, SEARCH, USER_SESSION, b"user", b"note", 0)
    found = ctypes.create_string_buffer(64)
    size = libc.syscall(KEYCTL, READ, key, found, 64) if key >= 0 else -1
    print("read", found.value[: max(size, 0)].decode() or "nothing")
"""


def keyring(server, step: str) -> str:
    with ws(server) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="keys.py", content=KEYS)
        said = called(agent, "bash", command=f"python3 keys.py {step}").result
        called(agent, "end_turn", response="done")
    return said


def test_a_note_one_episode_keeps_in_a_per_uid_keyring_reaches_no_later_episode(shellfix):
    stored = keyring(shellfix, "store")
    read = keyring(shellfix, "read")

    assert stored.startswith("stored -1 EPERM"), stored  # the keyrings are refused, as docker refuses them
    assert read.startswith("read nothing"), read


def test_the_agent_s_commands_make_no_user_namespace_to_be_root_in(shellfix):
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        said = called(agent, "bash", command="unshare --user --map-root-user id -u").result
        called(agent, "end_turn", response="done")

    assert "Operation not permitted" in said and not said.endswith("[exit status 0]"), said


# Holds one uid of the local range, as a server's episode does, and says which.
TAKE_A_UID = (
    "import asyncio, sys\nfrom corral.sandboxes.local.procs import UidPool\n"
    "pool = UidPool()\nprint(asyncio.run(pool.take()), flush=True)\nsys.stdin.read()\n"
)


def server_holding_a_uid(tmp: Path) -> tuple[subprocess.Popen[str], int]:
    tmp.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-c", TAKE_A_UID],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert server.stdout is not None
    return server, int(server.stdout.readline())


def test_two_root_servers_with_different_tmpdirs_never_share_a_uid_nor_kill_each_other_s_processes(tmp_path):
    first, first_uid = server_holding_a_uid(tmp_path / "one")
    episode = subprocess.Popen(as_uid(first_uid, ["sleep", "60"]), cwd="/")
    try:
        time.sleep(0.2)
        second, second_uid = server_holding_a_uid(tmp_path / "two")
        time.sleep(0.2)
        alive = episode.poll() is None
        for server in (first, second):
            server.communicate("")
    finally:
        episode.kill()
        episode.wait()

    assert first_uid != second_uid
    assert alive, "taking a uid killed another server's episode"
    assert UIDS_DIR == Path("/run/corral/uids") and UIDS_DIR.stat().st_mode & 0o777 == 0o700


ALLOCATE = "import sys\ntry:\n    kept = bytearray(700 << 20)\n    print('allocated', file=sys.stderr)\nexcept MemoryError:\n    print('refused', file=sys.stderr)\n"


def test_the_agent_s_commands_map_no_more_memory_than_the_env_s_bound(shellfix):
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="big.py", content=ALLOCATE)
        said = called(agent, "bash", command="python3 big.py").result
        ended = called(agent, "end_turn", response="done")

    assert said.startswith("refused"), said  # 700 MB past shellfix's memory_mb of 512
    assert (ended.status, ended.reward) == ("scored", 0.0), ended.reason


# At import, with the fix in place: past the bound the module cannot load, and the tests fail.
ALLOCATE_AT_IMPORT = "import sys\nkept = bytearray(700 << 20)\nprint('allocated', file=sys.stderr)\n"


def test_the_agent_s_code_the_tests_import_maps_no_more_either_and_scores_0(shellfix):
    ended = play(shellfix, [write("batching.py", ALLOCATE_AT_IMPORT + BUG)], fixed=True)
    output = ended.metadata["verifier_output"]["tests"]

    assert "MemoryError" in output and "allocated" not in output, output
    assert (ended.status, ended.reward) == ("scored", 0.0), output


# vsock (the host of a virtual machine), packet, Bluetooth, the kernel's crypto API, CAN, RDS,
# TIPC, XDP, KCM, Qualcomm IPC; then the families an env uses, which must still work.
FAMILIES = """
import socket
for family in (40, 17, 31, 38, 29, 21, 30, 44, 41, 42):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW):
        try:
            socket.socket(family, kind).close()
            print("made", family, kind)
        except OSError:
            pass
    try:
        socket.socketpair(family).close()
        print("made a pair", family)
    except OSError:
        pass
for family, kind in ((1, 1), (2, 1), (10, 2), (16, 3)):
    socket.socket(family, kind).close()
print("done")
"""


def test_the_agent_makes_sockets_of_no_family_but_local_internet_and_netlink(shellfix):
    with ws(shellfix) as agent:
        opened(agent, task_id=TASK)
        called(agent, "write_file", path="families.py", content=FAMILIES)
        said = called(agent, "bash", command="python3 families.py").result
        called(agent, "end_turn", response="done")

    assert said.splitlines()[0] == "done", said
