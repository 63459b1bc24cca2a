"""docker.whole_image.links' resolution, played on a map of links as the container would answer: each
step is judged before it is looked at, through any chain, so nothing reaches the verifier's
folders or /proc; what does not lead there resolves where the kernel would."""

from __future__ import annotations

import pytest

from corral.sandboxes.docker.whole_image.links import _named_ancestor
from corral.sandboxes.shared.links import walk as _walk
from corral.sandboxes.shared.shell_links import answer_fields as _fields

BROUGHT_IN = [b"/tests", b"/logs/verifier"]
IMAGE = {b"/bin": b"usr/bin", b"/dev/fd": b"/proc/self/fd", b"/tmp/up": b".."}  # as an image has them


def resolved(folder: bytes, target: bytes, links: dict[bytes, bytes]) -> bytes | str:
    walk = _walk(folder, target, BROUGHT_IN)
    try:
        step = next(walk)
        while True:
            step = walk.send(links.get(step))
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize(
    ("folder", "target", "links"),
    [
        (b"/app", b"/tests/data/expected.json", {}),
        (b"/app", b"../tests/data/expected.json", {}),
        (b"/app", b"e", {b"/app/e": b"/tmp/f", b"/tmp/f": b"../tests/data"}),
        (b"/app", b"d/expected.json", {b"/app/d": b"/tests/data"}),
        (b"/app", b"root/tests", {b"/app/root": b"/"}),
        (b"/app", b"/tmp/up/tests", {}),
        (b"/app", b"/proc/self/cwd/x", {}),
        (b"/app", b"/dev/fd/3", {}),
        (b"/app", b"/logs/verifier/reward.txt", {}),
        (b"/app", b"a", {b"/app/a": b"b", b"/app/b": b"a"}),
        (b"/app", b"/x\xff", {}),
    ],
)
def test_a_link_that_leads_into_the_verifiers_folders_or_proc_is_named(folder, target, links):
    why = resolved(folder, target, {**IMAGE, **links})
    assert isinstance(why, str), why


@pytest.mark.parametrize(
    ("folder", "target", "where"),
    [
        (b"/app", b"/etc/hostname", b"/etc/hostname"),
        (b"/app", b".", b"/app"),
        (b"/app", b"/bin/python3", b"/usr/bin/python3"),
        (b"/app", b"/nowhere/at/all", b"/nowhere/at/all"),
        (b"/app", b"../../..//testsx", b"/testsx"),
    ],
)
def test_any_other_link_resolves_where_the_kernel_would(folder, target, where):
    assert resolved(folder, target, IMAGE) == where


def test_an_answer_that_cannot_be_read_fails_the_check():
    assert _fields(b"NL3:a/bNP2:\xff\n", b"NLP", "") == [(b"N", None), (b"L", b"a/b"), (b"N", None), (b"P", b"\xff\n")]
    for answer in (b"L9:short", b"Lx:y", b"sh: readlink: not found", b"P1:a"):
        with pytest.raises(ValueError):
            _fields(answer, b"NL", "")


def test_a_name_the_engine_mangled_is_looked_for_from_the_nearest_folder_it_names_right():
    assert _named_ancestor("/app/data/\ufffd/x") == "/app/data"
    assert _named_ancestor("/\ufffd") == "/"
