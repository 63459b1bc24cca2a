"""shared.shell_links, through a real `/bin/sh` on this machine: links that lead through each other are
resolved with each path asked of the sandbox once, and a check that would ask more paths than
MOST_PATHS stops the verifier (the agent's doing) instead of running for minutes."""

from __future__ import annotations

import asyncio
import os

from corral.sandboxes.shared import shell_links
from corral.sandboxes.shared.shell_links import QUERY, forged_links_under


def counting_shell(asked: list[int]) -> shell_links.Shell:
    """`/bin/sh -c` here; appends to `asked` how many paths each lstat query names."""

    async def run(arguments: list[str]) -> tuple[bytes, str]:
        if arguments[0] == QUERY:
            asked.append(len(arguments) - 2)
        shell = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", *arguments, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        output, errors = await shell.communicate()
        return output, errors[-1000:].decode(errors="replace")

    return run


def test_a_long_chain_of_links_is_resolved_asking_each_path_once(tmp_path):
    (tmp_path / "files").mkdir()
    chain = tmp_path / "work"
    chain.mkdir()
    for i in range(1000):  # l0 -> l1 -> ... -> l999 -> the verifier's file
        os.symlink(f"l{i + 1}", chain / f"l{i}")
    os.symlink(tmp_path / "files" / "expected.txt", chain / "l1000")
    asked: list[int] = []

    found = asyncio.run(forged_links_under(counting_shell(asked), [str(chain)], [str(tmp_path / "files")]))

    # The last 41 links lead into the files within the kernel's 40 hops; the rest loop past them.
    assert len(found) == 1001
    assert sum("leads into" in line for line in found) == 41
    assert sum(asked) < 20  # the roots' folders; every link's target came with the listing


def test_links_that_would_take_too_many_queries_stop_the_verifier(tmp_path, monkeypatch):
    monkeypatch.setattr(shell_links, "MOST_PATHS", 20)
    work = tmp_path / "work"
    work.mkdir()
    for i in range(30):  # each to a path of its own that only the sandbox can answer for
        os.symlink(f"/nowhere-{i}", work / f"l{i}")

    found = asyncio.run(forged_links_under(counting_shell([]), [str(work)], [str(tmp_path / "files")]))

    assert found == [
        "the links the agent left take more than 20 paths to resolve; the verifier does not run on what cannot be checked"
    ]


def test_links_whose_names_are_not_text_are_read_with_the_agents_rights_by_their_bytes(tmp_path):
    """Names cross the engine's API as printf formats of ASCII: a name that is not UTF-8, or holds
    a newline, a % or a backslash, comes back as its bytes (a fix beside such links still scores)."""
    work = tmp_path / "work"
    odd = [b"\xc3(", b"line\n", b"50%\\q"]
    os.makedirs(os.path.join(bytes(work), odd[0]))
    for name in odd:
        os.symlink(b"/etc/hostname", os.path.join(bytes(work), odd[0], name))
    os.symlink("/nowhere", work / "dangling")

    found = asyncio.run(forged_links_under(counting_shell([]), [str(work)], ["/verifier"], agent=counting_shell([])))
    refused = asyncio.run(shell_links._listed(counting_shell([]), shell_links.UNREADABLE, [bytes(work / "dangling")]))
    readable = asyncio.run(
        shell_links._listed(
            counting_shell([]), shell_links.READABLE, [os.path.join(bytes(work), odd[0], name) for name in odd]
        )
    )

    assert found == []  # the agent reads what the tests read: nothing to judge
    assert refused == [bytes(work / "dangling")]
    assert readable == [os.path.join(bytes(work), odd[0], name) for name in odd]
