"""The seccomp filter every process of a local episode runs under (`bwrap --seccomp FD`).

Where the server is root, the agent's uid is a host uid: no user namespace separates it from
the machine, so what the kernel keeps per uid outlives the episode and reaches the next
episode given the same uid (a note `add_key` stores in the user keyring), and what the kernel
lets any user do (make user namespaces, and inside them mount, as root of their own) is a
kernel attack surface docker's default profile closes. This filter refuses (EPERM) what that
profile refuses and a contained env has no use for: one table, `REFUSED`, below.

Memory a file or an IPC object holds is no process's map, so RLIMIT_AS (the env's `memory_mb`,
local.quota) never counts it: a memfd, a System V shared memory segment, message queue or
semaphore set each held 128 MB past a 96 MB bound, the kernel's own limits on them being
fractions of the machine. Those calls answer ENOSYS (`ABSENT`), as a kernel built without
them would, and programs fall back to files in /dev/shm and /tmp, which a sized tmpfs bounds
(local.sandbox's scratch).

`socket` and `socketpair` make only the address families an env has a use for (`FAMILIES`:
local sockets, IPv4, IPv6, and netlink, which glibc's getaddrinfo and `ip` ask the kernel's
addresses through); any other (vsock to the host of a virtual machine, packet, Bluetooth, the
kernel's crypto API, and the families no env has heard of) answers EAFNOSUPPORT, as a kernel
built without it would.

`clone` and `unshare` are refused only with a namespace flag (as docker does without
CAP_SYS_ADMIN); `clone3`, whose flags sit in memory a filter cannot read, answers ENOSYS so
libc falls back to `clone`. `personality` takes only the values docker allows. On x86-64, the
x32 numbers (bit 30) are refused, and a call of another architecture (32-bit `int 0x80`)
kills its process, as docker's profile would: their numbers differ, so the table would not
cover them.

Built with the standard library: a classic BPF program of `struct sock_filter`s, which
bubblewrap installs (with `no_new_privs`) after it has made the namespaces, so it binds the
env, the agent's processes and the verifier, and nothing of the server's.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# name: (x86-64 number, aarch64 number); None where the architecture has no such call.
REFUSED: dict[str, tuple[int | None, int | None]] = {
    # per-uid kernel state that would outlive the episode: keyrings
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    # kernel attack surface no env needs
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "lookup_dcookie": (212, 18),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    # namespaces and mounts: entering or mounting
    "setns": (308, 268),
    "unshare": (272, 97),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    # the machine's: kernel modules, kexec, clocks, swap, accounting, quotas, the console
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "create_module": (174, None),
    "get_kernel_syms": (177, None),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "settimeofday": (164, 170),
    "syslog": (103, 116),
    "vhangup": (153, 58),
    "nfsservctl": (180, 42),
    "iopl": (172, None),
    "ioperm": (173, None),
    "uselib": (134, None),
    "ustat": (136, None),
    "sysfs": (139, None),
    "_sysctl": (156, None),
}
# name: numbers as in REFUSED; answered ENOSYS, so their users fall back to bounded files.
ABSENT: dict[str, tuple[int | None, int | None]] = {
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "shmget": (29, 194),
    "msgget": (68, 186),
    "semget": (64, 190),
}
CLONE, CLONE3, PERSONALITY = (56, 220), (435, 435), (135, 92)
SOCKET, SOCKETPAIR = (41, 198), (53, 199)
FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Linux, Linux32, UNAME26 and both, a query

ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7), "arm64": (1, 0xC00000B7)}  # column, AUDIT_ARCH
X32_BIT = 0x40000000

LD_ABS, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|JSET|JGE|K, BPF_RET|K
ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low half on little-endian machines)


def _errno(number: int) -> int:
    return 0x00050000 | number  # SECCOMP_RET_ERRNO


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (default: this one's, `platform.machine()`), as bwrap reads it.
    ValueError on an architecture the table has no numbers for."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise ValueError(
            f"the local sandbox's seccomp filter knows x86_64 and aarch64, not {machine}; "
            "serve with --sandbox docker on this machine"
        )
    column, audit_arch = ARCHES[machine]
    refuse = _op(RET, _errno(errno.EPERM))
    ops = [_op(LD_ABS, ARCH), _op(JEQ, audit_arch, jt=1), _op(RET, KILL_PROCESS), _op(LD_ABS, NR)]
    if column == 0:  # x32's numbers alias x86-64's with bit 30 set
        ops += [_op(JGE, X32_BIT, jf=1), refuse]
    for numbers in REFUSED.values():
        if (number := numbers[column]) is not None:
            ops += [_op(JEQ, number, jf=1), refuse]
    absent = _op(RET, _errno(errno.ENOSYS))
    for numbers in [*ABSENT.values(), CLONE3]:
        if (number := numbers[column]) is not None:
            ops += [_op(JEQ, number, jf=1), absent]
    # Each block below ends in a return: A holds an argument there, not the number.
    ops += [_op(JEQ, CLONE[column], jf=4), _op(LD_ABS, ARG0), _op(JSET, NAMESPACE_FLAGS, jf=1), refuse, _op(RET, ALLOW)]
    for call in (SOCKET, SOCKETPAIR):
        made = [_op(JEQ, family, jt=len(FAMILIES) - index) for index, family in enumerate(FAMILIES)]
        ops += [_op(JEQ, call[column], jf=len(made) + 3), _op(LD_ABS, ARG0), *made]
        ops += [_op(RET, _errno(errno.EAFNOSUPPORT)), _op(RET, ALLOW)]
    allowed = [_op(JEQ, value, jt=len(PERSONALITIES) - index) for index, value in enumerate(PERSONALITIES)]
    ops += [_op(JEQ, PERSONALITY[column], jf=len(allowed) + 2), _op(LD_ABS, ARG0), *allowed, refuse]
    return b"".join([*ops, _op(RET, ALLOW)])


def program_fd(machine: str | None = None) -> int:
    """A file descriptor to read `program()` from, at its start (for `bwrap --seccomp FD`);
    the caller closes it."""
    fd = os.memfd_create("corral-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program(machine))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
