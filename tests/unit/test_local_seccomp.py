"""The local sandbox's seccomp filter, run by a small classic-BPF interpreter here, for both
architectures it knows (the integration tests run x86-64's under bubblewrap; no aarch64
machine runs in CI)."""

from __future__ import annotations

import errno
import struct

import pytest

from corral.sandboxes.local.seccomp import (
    ABSENT,
    ALLOW,
    ARCHES,
    CLONE,
    CLONE3,
    FAMILIES,
    KILL_PROCESS,
    PERSONALITY,
    REFUSED,
    SOCKET,
    SOCKETPAIR,
    program,
)

EPERM, ENOSYS, EAFNOSUPPORT = (0x50000 | number for number in (errno.EPERM, errno.ENOSYS, errno.EAFNOSUPPORT))
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17


def verdict(machine: str, number: int, arg0: int = 0, arch: int | None = None) -> int:
    """What the filter for `machine` answers a call `number(arg0)` of `arch` (default: its own)."""
    code = program(machine)
    ops = [struct.unpack("=HBBI", code[at : at + 8]) for at in range(0, len(code), 8)]
    fields = {0: number, 4: ARCHES[machine][1] if arch is None else arch, 16: arg0}
    accumulator, at = 0, 0
    while True:
        op, jt, jf, k = ops[at]
        if op == 0x20:
            accumulator = fields[k]
        elif op == 0x06:
            return k
        else:
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[op]
            at += jt if taken else jf
        at += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_call_of_the_table_is_refused_and_the_rest_allowed(machine):
    column = ARCHES[machine][0]
    refused = {numbers[column] for numbers in REFUSED.values()} - {None}
    clone, clone3, personality = CLONE[column], CLONE3[column], PERSONALITY[column]
    read = (0, 63)[column]

    assert all(verdict(machine, number) == EPERM for number in refused)
    assert verdict(machine, read) == ALLOW
    assert verdict(machine, clone, SIGCHLD) == ALLOW  # fork
    assert verdict(machine, clone, CLONE_NEWUSER | SIGCHLD) == EPERM
    assert verdict(machine, clone3) == ENOSYS  # libc falls back to clone
    assert all(verdict(machine, numbers[column]) == ENOSYS for numbers in ABSENT.values())
    assert verdict(machine, personality, 0xFFFFFFFF) == ALLOW and verdict(machine, personality, 0x0400000) == EPERM
    assert verdict(machine, read, arch=0x40000003) == KILL_PROCESS  # i386's int 0x80


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_sockets_of_the_listed_families_alone_are_made(machine):
    column = ARCHES[machine][0]
    others = set(range(64)) - set(FAMILIES)  # AF_MAX is 46 today

    for call in (SOCKET[column], SOCKETPAIR[column]):
        assert all(verdict(machine, call, family) == ALLOW for family in FAMILIES)
        assert all(verdict(machine, call, family) == EAFNOSUPPORT for family in others)


def test_x32_numbers_are_refused_on_x86_64():
    assert verdict("x86_64", 0x40000000) == EPERM


def test_an_architecture_without_numbers_is_refused_naming_docker():
    with pytest.raises(ValueError, match="--sandbox docker"):
        program("riscv64")
