"""How each Harbor task's image is made, on an engine that may reach no registry.

A task names a prebuilt `docker_image`, or builds `environment/Dockerfile`, whose `FROM` lines
usually name public images (python:3.12-slim, ubuntu:24.04). bundle.toml's `[base_images]` maps
such a name to an image this engine has, or to a folder beside the tasks that corral builds
first (with the image cache, like any env):

    [base_images]
    "ubuntu:24.04" = "debian:bookworm-slim"          # a local image
    "python:3.12-slim" = { build = "images/python" }  # a folder with a Dockerfile

A task whose Dockerfile uses a mapped name is built from a copy of its `environment/` with
those `FROM` lines rewritten (in `$TMPDIR/corral-harbor-UID/contexts/`, named by a digest, so
an unchanged task is never rebuilt); the task's own folder is never changed. A `docker_image`
is used when the engine has it (after the map), else the task's Dockerfile is built.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from corral.errors import ImageError
from corral.sandboxes import Prepared, SandboxProvider, SandboxSpec
from corral.sandboxes.base import Progress
from corral.sandboxes.env_digest import context_digest

_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
_NO_REGISTRY = (
    "pull access denied",
    "dial tcp",
    "no such host",
    "lookup ",
    "manifest unknown",
    "TLS handshake",
    "failed to resolve",
    "connection refused",
    "i/o timeout",
)


@dataclass(frozen=True)
class BaseBuild:
    """A base image corral builds from a folder of the bundle."""

    folder: Path


@dataclass
class ImagePlan:
    """The bundle's base-image map and each task's `docker_image` (by task id); `used` counts
    the mapped names the tasks' images were made with, for `corral check`."""

    base_images: dict[str, str | BaseBuild]
    docker_images: dict[str, str]
    used: Counter = field(default_factory=Counter)
    mapped: dict[str, str] = field(default_factory=dict)  # a mapped name -> the image it became
    bases: dict[Path, str] = field(default_factory=dict)  # a BaseBuild's folder -> the image built from it

    async def prepare(
        self, provider: SandboxProvider, spec: SandboxSpec, progress: Progress
    ) -> tuple[SandboxSpec, Prepared]:
        """Make the task's image with `provider`: (the spec it was made from, what prepare did)."""
        dockerfile = spec.context_dir / spec.dockerfile
        prebuilt = self.docker_images.get(spec.env_name)
        if prebuilt is not None:
            image = self.base_images.get(_normal(prebuilt), prebuilt)
            if isinstance(image, str):
                try:
                    ready = replace(spec, image=image)
                    return ready, await provider.prepare(ready, progress)
                except ImageError as error:
                    if not dockerfile.is_file():
                        raise ImageError(
                            f"task {spec.env_name}: its docker_image {image} is not on this engine and it "
                            "has no environment/Dockerfile to build instead; load the image (docker load), "
                            f"or map it to a local one in bundle.toml [base_images] ({error})"
                        ) from None
                    progress(f"task {spec.env_name}: docker_image {image} is not here; building environment/Dockerfile")
        if not dockerfile.is_file():
            raise ImageError(f"task {spec.env_name} has no environment/{spec.dockerfile} and no docker_image; add one")
        text = dockerfile.read_text()
        rewritten = await self._rewrite(provider, text, progress)
        ready = spec if rewritten == text else replace(spec, context_dir=_context_copy(spec, rewritten))
        try:
            return ready, await provider.prepare(ready, progress)
        except ImageError as error:
            unmapped = sorted({name for _, name, _ in _FROM.findall(text) if _normal(name) not in self.base_images})
            if unmapped and any(sign in str(error) for sign in _NO_REGISTRY):
                raise ImageError(
                    f"{error}; no registry answers here: map {', '.join(unmapped)} to a local image in "
                    "bundle.toml [base_images]"
                ) from None
            raise

    async def _rewrite(self, provider: SandboxProvider, text: str, progress: Progress) -> str:
        """The Dockerfile's text with each mapped FROM image replaced (bases built as needed)."""
        replacements: dict[str, str] = {}
        for _, name, _ in _FROM.findall(text):
            target = self.base_images.get(_normal(name))
            if target is None or name in replacements:
                continue
            if isinstance(target, BaseBuild):
                if target.folder not in self.bases:
                    base = SandboxSpec(env_name=f"base-{target.folder.name}", context_dir=target.folder, command=())
                    self.bases[target.folder] = (await provider.prepare(base, progress)).image or ""
                replacements[name] = self.bases[target.folder]
            else:
                replacements[name] = target
            self.used[name] += 1
            self.mapped[name] = replacements[name]
        return _FROM.sub(lambda m: f"{m[1]}{replacements.get(m[2], m[2])}{m[3]}", text)


def read_base_images(raw: dict[str, object], root: Path) -> tuple[dict[str, str | BaseBuild], list[str]]:
    """bundle.toml's [base_images], checked: (the map, by normalised name; what is wrong with it)."""
    found: dict[str, str | BaseBuild] = {}
    problems = []
    for name, target in raw.items():
        if isinstance(target, str) and target:
            found[_normal(name)] = target
        elif isinstance(target, dict) and set(target) == {"build"} and isinstance(target["build"], str):
            folder = (root / target["build"]).resolve()
            if not (folder / "Dockerfile").is_file():
                problems.append(f"[base_images] {name!r} builds {target['build']!r}, which has no Dockerfile; add one")
                continue
            found[_normal(name)] = BaseBuild(folder)
        else:
            problems.append(f'[base_images] {name!r} = {target!r}: give a local image name, or {{ build = "FOLDER" }}')
    return found, problems


def from_images(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's FROM lines name (stages included)."""
    return [name for _, name, _ in _FROM.findall(dockerfile.read_text())] if dockerfile.is_file() else []


def _normal(name: str) -> str:
    """An image name without the default registry's prefixes: docker.io/library/python:3 -> python:3."""
    for prefix in ("docker.io/", "index.docker.io/", "library/"):
        name = name.removeprefix(prefix)
    return name


def _context_copy(spec: SandboxSpec, dockerfile: str) -> Path:
    """A copy of the task's build context with `dockerfile` as its Dockerfile, written once."""
    root = Path(tempfile.gettempdir()) / f"corral-harbor-{os.getuid()}" / "contexts"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    rewritten = hashlib.sha256(dockerfile.encode()).hexdigest()[:12]
    target = root / f"{spec.env_name}-{context_digest(spec.context_dir)}-{rewritten}"
    if not target.is_dir():
        building = root / f".{target.name}-{uuid.uuid4().hex[:8]}"
        shutil.copytree(spec.context_dir, building)
        (building / spec.dockerfile).write_text(dockerfile)
        try:
            building.rename(target)
        except OSError:  # made meanwhile by another server: the same
            shutil.rmtree(building, ignore_errors=True)
    return target
