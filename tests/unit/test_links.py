"""links.forged_links_here: the links of a local verifier's copy that lead into the verifier's
own files or /proc are found, through chains and relative steps, and deep down; links
elsewhere are not (tests/integration/test_linked_answers.py plays the episodes)."""

from __future__ import annotations

import os

from corral.sandboxes.shared.links import forged_links_here


def test_links_into_the_verifier_s_files_or_proc_are_found_and_others_not(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "expected.txt").write_text("secret")
    work = tmp_path / "work"
    deep = work / os.path.join(*["d"] * 300)  # deeper (1,500): tests/integration/test_adversary.py
    deep.mkdir(parents=True)
    for name, target in {
        "up": "../files/expected.txt",
        "fd": "/proc/self/fd/3",
        "dev": "/dev/fd/3",
        "chain": "up",
        "root": "/",
        "self": ".",
        "dangling": "nowhere",
        "etc": "/etc/hostname",
    }.items():
        (work / name).symlink_to(target)
    (deep / "far").symlink_to(tmp_path / "files")

    found = forged_links_here(str(work), [str(tmp_path / "files")])

    assert sorted(line.split(" -> ")[0].rsplit("/", 1)[1] for line in found) == ["chain", "dev", "far", "fd", "up"]
