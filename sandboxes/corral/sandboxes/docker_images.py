"""Env images: one per env folder, tagged by a digest of the folder's content.

An env folder is a Docker build context. Its tag is `corral-env/<env>:<digest>`, where the
digest covers every file the build is sent (path, executable bit, bytes) and the Dockerfile's
name, so an unchanged folder is never rebuilt and any change builds a new image. The build
context is made here from the same file list the digest reads, so what was hashed is exactly
what was built. Python's byte-code caches are left out of both: running an env with the local
provider writes `__pycache__` into its folder, and that must not look like a change.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

IMAGE_REPOSITORY = "corral-env"
DIGEST_CHARS = 16
_SKIPPED_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}

Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """An env image could not be built or found; the message says which and why."""


@dataclass(frozen=True)
class EnvImage:
    """Where an env's image comes from: its build context and Dockerfile, or a named image."""

    env_name: str
    context_dir: Path
    dockerfile: str = "Dockerfile"
    image: str | None = None  # a prebuilt image (env.toml `image`): used as it is, never built

    @functools.cached_property
    def tag(self) -> str:
        """The image a sandbox of this env runs: the named image, or the content-digest tag
        (read from the folder once per EnvImage)."""
        if self.image is not None:
            return self.image
        return f"{IMAGE_REPOSITORY}/{self.env_name.lower()}:{context_digest(self.context_dir, self.dockerfile)}"


@dataclass(frozen=True)
class BuildResult:
    env_name: str
    tag: str
    built: bool  # False: the image was there already


def context_files(context_dir: Path) -> Iterator[Path]:
    """The files of a build context, sorted, without byte-code caches and VCS folders."""
    for folder, dirs, files in os.walk(context_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
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


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(client: docker.DockerClient, env: EnvImage, progress: Progress = lambda line: None) -> BuildResult:
    """Build `env`'s image unless an image with its tag exists (blocking; run it off the loop)."""
    tag = env.tag
    if image_exists(client, tag):
        return BuildResult(env.env_name, tag, built=False)
    if env.image is not None:
        raise ImageError(
            f"env {env.env_name} names image {env.image!r}, which this Docker engine does not have; "
            f"pull or build it (docker pull {env.image}), or drop `image` from env.toml to build the env folder"
        )
    if not (env.context_dir / env.dockerfile).is_file():
        raise ImageError(
            f"env {env.env_name} has no {env.dockerfile} in {env.context_dir}; add one (FROM an image with "
            "python3), or name a prebuilt image with `image = ...` in env.toml"
        )
    progress(f"building {tag} for env {env.env_name} from {env.context_dir}")
    _build(client, env, tag, progress)
    return BuildResult(env.env_name, tag, built=True)


def _build(client: docker.DockerClient, env: EnvImage, tag: str, progress: Progress) -> None:
    context = _context_tar(env.context_dir)
    stream = client.api.build(
        fileobj=context, custom_context=True, tag=tag, dockerfile=env.dockerfile, rm=True,
        forcerm=True, decode=True, labels={"corral.env": env.env_name},
    )
    for chunk in stream:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message", chunk["error"])
            raise ImageError(f"building the image of env {env.env_name} ({env.context_dir}) failed: {detail.strip()}")
        line = chunk.get("stream", "").rstrip()
        if line:
            progress(f"  {env.env_name}: {line}")
    if not image_exists(client, tag):
        raise ImageError(f"building the image of env {env.env_name} ended without an image {tag}; see the output above")


def _context_tar(context_dir: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in context_files(context_dir):
            tar.add(path, arcname=path.relative_to(context_dir).as_posix(), recursive=False)
    buffer.seek(0)
    return buffer
