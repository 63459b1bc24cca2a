"""An env folder's content digest: what names its image on every provider that builds one.

An env folder is a build context. The digest covers every file a build is sent (path,
executable bit, bytes) and the Dockerfile's name, so an unchanged folder is never rebuilt and
any change builds a new image (docker and kubernetes name their images with it, `image_tag`;
modal keys its image cache by it). Python's byte-code caches and VCS folders are left out: running an env with the local
provider writes `__pycache__` into its folder, and that must not look like a change.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from corral.sandboxes.base import SandboxSpec

IMAGE_REPOSITORY = "corral-env"
DIGEST_CHARS = 16
SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def context_files(context_dir: Path) -> Iterator[Path]:
    """The files of a build context, sorted, without byte-code caches and VCS folders."""
    for folder, dirs, files in os.walk(context_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            if not name.endswith(SKIPPED_SUFFIXES):
                yield Path(folder, name)


def context_digest(context_dir: Path, dockerfile: str = "Dockerfile") -> str:
    """A hex digest of everything a build of `context_dir` is sent."""
    digest = hashlib.sha256(f"dockerfile={dockerfile}\n".encode())
    for path in context_files(context_dir):
        relative = path.relative_to(context_dir).as_posix()
        executable = bool(path.stat().st_mode & stat.S_IXUSR)
        digest.update(f"{relative}\0{int(executable)}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:DIGEST_CHARS]


def skipped(relative: Path) -> bool:
    """Whether a path of a build context (relative to it) is left out, as `context_files` leaves
    it: for a provider whose builder takes an ignore rule rather than a file list."""
    return any(part in SKIPPED_DIRS for part in relative.parts) or relative.name.endswith(SKIPPED_SUFFIXES)


def image_tag(spec: SandboxSpec) -> str:
    """The image a sandbox of `spec` runs: its prebuilt `image`, or the content-digest tag of
    its folder, `corral-env/<env>:<digest>` (read from disk: a provider computes it once per spec)."""
    if spec.image is not None:
        return spec.image
    return f"{IMAGE_REPOSITORY}/{spec.env_name.lower()}:{context_digest(spec.context_dir, spec.dockerfile)}"


def in_registry(registry: str, tag: str) -> str:
    """`tag` (an env's content tag, `image_tag`) under `registry` (host[:port][/path]): the name
    `corral build --push` pushes it as and the kubernetes provider's pods pull."""
    return f"{registry.rstrip('/')}/{tag}"
