"""Make the wheelhouse the server image installs from: `python3 docker/wheelhouse.py`.

Containers built on a host like ours reach no package index on their own (PyPI answers
them only through the host's CA bundle), so the image installs with `pip --no-index` from
wheels this script downloads on the host into `build/wheelhouse/`, which the Dockerfile
copies in. It holds corral's dependencies for the `docker` extra (server + Docker SDK, no
torch) and the build backend, never corral itself: the image builds corral from the source
tree. A second run downloads nothing unless pyproject.toml's dependencies changed (or with
`--refresh`, to take newer releases), so the image's dependency layer stays cached.

The wheels are chosen for the image's Python (Debian bookworm's CPython 3.11 on glibc 2.36),
not for the Python running this script, so any host Python 3.11+ makes a working wheelhouse.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / "build" / "wheelhouse"
EXTRA = "docker"
# The image's interpreter: `FROM debian:bookworm-slim` + apt's python3.
IMAGE_PYTHON = "3.11"
IMAGE_ABI = "cp311"
IMAGE_GLIBC_MINOR = 36


def requirements(pyproject: Path, extra: str) -> list[str]:
    """The requirements of corral with `extra`, self-references (`corral[server]`) expanded,
    plus the build backend (the image builds corral without build isolation)."""
    project_toml = tomllib.loads(pyproject.read_text())
    project = project_toml["project"]
    optional = project.get("optional-dependencies", {})
    self_reference = re.compile(rf"^{re.escape(project['name'])}\[(?P<extras>[^\]]+)\]$")

    found: list[str] = list(project.get("dependencies", []))
    pending, seen = [extra], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in optional:
            raise SystemExit(f"pyproject.toml has no optional dependency group {name!r}")
        for requirement in optional[name]:
            if match := self_reference.match(requirement.replace(" ", "")):
                pending.extend(e.strip() for e in match["extras"].split(","))
            else:
                found.append(requirement)
    found.extend(project_toml["build-system"]["requires"])
    return list(dict.fromkeys(found))


def manylinux_tags(machine: str, glibc_minor: int) -> list[str]:
    """Every manylinux platform tag a glibc 2.`glibc_minor` system runs, newest first: pip
    before 24 takes `--platform` literally, so an older wheel's tag must be named too."""
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc_minor, 4, -1)]
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    return tags + [f"{name}_{machine}" for name, minor in legacy.items() if minor <= glibc_minor]


def download(wanted: list[str], into: Path) -> None:
    """Download binary wheels of `wanted` and everything they need, for the image."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--dest",
        str(into),
        *wanted,
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        IMAGE_PYTHON,
        "--abi",
        IMAGE_ABI,
    ]
    for tag in manylinux_tags(platform.machine(), IMAGE_GLIBC_MINOR):
        command += ["--platform", tag]
    subprocess.run(command, check=True)


def main() -> None:
    refresh = "--refresh" in sys.argv[1:]
    wanted = "\n".join(requirements(REPO / "pyproject.toml", EXTRA)) + "\n"
    manifest = WHEELHOUSE / "requirements.txt"  # written last: its presence means complete
    if not refresh and manifest.exists() and manifest.read_text() == wanted:
        # The same wheels as last time keep the image's dependency layer cached.
        print(f"wheelhouse: up to date in {WHEELHOUSE.relative_to(REPO)} (--refresh to download again)")
        return
    if WHEELHOUSE.exists():
        shutil.rmtree(WHEELHOUSE)  # no stale wheels: the folder is exactly what the image needs
    WHEELHOUSE.mkdir(parents=True)
    download(wanted.splitlines(), WHEELHOUSE)
    manifest.write_text(wanted)
    wheels = sorted(WHEELHOUSE.glob("*.whl"))
    size_mb = sum(w.stat().st_size for w in wheels) / 1e6
    print(f"wheelhouse: {len(wheels)} wheels ({size_mb:.0f} MB) in {WHEELHOUSE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
