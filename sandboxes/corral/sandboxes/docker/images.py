"""Env images: one per env folder, tagged by a digest of the folder's content.

An env folder is a Docker build context. Its tag is `corral-env/<env>:<digest>` (env_digest.image_tag),
so an unchanged folder is never rebuilt and any change builds a new image. The build context
is made here from the same file list the digest reads, so what was hashed is exactly what was
built.
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import docker
import docker.errors

from corral.errors import ImageError
from corral.sandboxes.base import Prepared, Progress, SandboxSpec
from corral.sandboxes.env_digest import context_files, image_tag


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """Whether the engine holds an image tagged `tag`."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(client: docker.DockerClient, spec: SandboxSpec, progress: Progress = lambda line: None) -> Prepared:
    """Build `spec`'s image unless an image with its tag exists, or check that its prebuilt
    image does (blocking; run it off the loop). Raises ImageError naming the env and the fix."""
    started = time.monotonic()
    tag = image_tag(spec)
    if image_exists(client, tag):
        return Prepared(spec.env_name, tag, built=False, seconds=time.monotonic() - started)
    if spec.image is not None:
        raise ImageError(
            f"env {spec.env_name} names image {spec.image!r}, which this Docker engine does not have; "
            f"pull or build it (docker pull {spec.image}), or drop `image` from env.toml to build the env folder"
        )
    if not (spec.context_dir / spec.dockerfile).is_file():
        raise ImageError(
            f"env {spec.env_name} has no {spec.dockerfile} in {spec.context_dir}; add one (FROM an image with "
            "python3), or name a prebuilt image with `image = ...` in env.toml"
        )
    progress(f"building {tag} for env {spec.env_name} from {spec.context_dir}")
    _build(client, spec, tag, progress)
    return Prepared(spec.env_name, tag, built=True, seconds=time.monotonic() - started)


def _build(client: docker.DockerClient, spec: SandboxSpec, tag: str, progress: Progress) -> None:
    context = _context_tar(spec.context_dir)
    stream = client.api.build(
        fileobj=context,
        custom_context=True,
        tag=tag,
        dockerfile=spec.dockerfile,
        rm=True,
        forcerm=True,
        decode=True,
        labels={"corral.env": spec.env_name},
    )
    for chunk in stream:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message", chunk["error"])
            raise ImageError(f"building the image of env {spec.env_name} ({spec.context_dir}) failed: {detail.strip()}")
        line = chunk.get("stream", "").rstrip()
        if line:
            progress(f"  {spec.env_name}: {line}")
    if not image_exists(client, tag):
        raise ImageError(
            f"building the image of env {spec.env_name} ended without an image {tag}; see the output above"
        )


def _context_tar(context_dir: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in context_files(context_dir):
            tar.add(path, arcname=path.relative_to(context_dir).as_posix(), recursive=False)
    buffer.seek(0)
    return buffer
