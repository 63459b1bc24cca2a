"""The folders a Harbor task's tests get from corral (the tests' files, their HOME, the folder of
each result file): tmpfs volumes of bounded size, held mounted by a keeper container.

Why: as plain engine volumes they were folders on this machine's disk that docker.whole_image.disk does
not watch, and the tests run the agent's programs (as root, where the task's agent is root),
which filled them without bound. A volume of the engine's `local` driver made as a tmpfs is
bounded by its size (and its pages count against the memory of the container that wrote
them). But the engine mounts such a volume only while a running container uses it, and
unmounts it, contents and all, when the last one ends; the tests' container ends with its
command, before the results are read. So a keeper holds the volumes: a container of the task's
image as built (the agent's changes are in its own container, committed apart), hardened as
the agent's was, whose only process is that image's /bin/sleep. The files go in through the
keeper and the results come back through it, so no program the agent changed takes part, and
no path it left is followed: the keeper's folders are the image's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import docker.errors
import docker.types

from corral.errors import SandboxError
from corral.sandboxes.base import INODES_PER_MB, SandboxSpec
from corral.sandboxes.docker.engine import Engine, remove_container

SLEEP = "/bin/sleep"
KEEPER_USER = "65534:65534"  # nobody: the keeper only sleeps
FILES_MB_MIN = 16


@dataclass(frozen=True)
class Keeper:
    """The keeper's container and, for each folder it holds, the volume's name."""

    container: str
    volumes: Mapping[str, str]

    def mounts(self) -> list[docker.types.Mount]:
        """The same volumes, for the tests' container (by name: removing it leaves them)."""
        return [
            docker.types.Mount(folder, volume, type="volume", no_copy=True) for folder, volume in self.volumes.items()
        ]


def sizes_mb(spec: SandboxSpec, files: Mapping[str, bytes], files_dir: str, folders: Sequence[str]) -> dict[str, int]:
    """Each folder's bound: room for the files at `files_dir` (twice their size, 16 MB at
    least); the task's disk bound, else its memory, for HOME and each result folder."""
    files_mb = max(FILES_MB_MIN, 2 * math.ceil(sum(len(content) for content in files.values()) / 2**20))
    room = spec.resources.disk_mb or spec.resources.memory_mb
    return {files_dir: files_mb, **{folder: room for folder in folders}}


async def start_keeper(
    engine: Engine,
    config: Mapping,
    name: str,
    sizes: Mapping[str, int],
    *,
    by_root_only: bool,
    lifetime_s: float,
    made: list[str],
) -> Keeper:
    """Start a keeper of tmpfs volumes at `sizes`' folders (files_dir first: root's, 0755; the
    others writable by root only where `by_root_only`, else by all), for at most `lifetime_s`;
    its id goes into `made` at once, so that it is removed whatever happens next."""
    folders = list(sizes)
    labels = {**{k: v for k, v in config["labels"].items() if k != "corral.pool"}, "corral.purpose": "verify"}
    mounts = [
        _tmpfs_volume(folder, mb, mode="0755" if index == 0 or by_root_only else "0777", labels=labels)
        for index, (folder, mb) in enumerate(sizes.items())
    ]
    host_config = {
        **config["host_config"],
        "Mounts": mounts,
        "NetworkMode": "none",
        "AutoRemove": True,
        "CapAdd": None,
        "LogConfig": {"Type": "none", "Config": {}},
    }
    keeper = {
        "image": config["image"],
        "entrypoint": [SLEEP, str(math.ceil(lifetime_s))],
        "command": [],
        "user": KEEPER_USER,
        "environment": {},
        "working_dir": "/",
        "name": f"{name}-keeper",
        "labels": labels,
        "host_config": host_config,
        "detach": True,
        "use_config_proxy": False,
    }
    try:
        made.append((await engine.call(engine.api.create_container, **keeper))["Id"])
        await engine.call(engine.api.start, made[0])
        found = (await engine.call(engine.api.inspect_container, made[0]))["Mounts"]
    except docker.errors.APIError as error:
        raise SandboxError(
            f"could not start the container that holds the tests' folders (image {config['image']}, "
            f"its {SLEEP}): {error.explanation or error}"
        ) from None
    volumes = {mount["Destination"]: mount["Name"] for mount in found if mount.get("Type") == "volume"}
    return Keeper(made[0], {folder: volumes[folder] for folder in folders})


def _tmpfs_volume(folder: str, size_mb: int, *, mode: str, labels: Mapping[str, str]) -> docker.types.Mount:
    """A volume labelled as the keeper is (its instance and run): one a killed server left is
    removed when a server of its instance starts (Engine.reap)."""
    options = f"nosuid,nodev,size={size_mb}m,nr_inodes={size_mb * INODES_PER_MB},mode={mode}"
    driver = docker.types.DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options})
    return docker.types.Mount(folder, None, type="volume", no_copy=True, driver_config=driver, labels=dict(labels))


def remove_keeper(engine: Engine, keeper: str) -> None:
    """Remove the keeper with its volumes (blocking; after the tests' container has gone, which
    names them and so leaves them). A removal under way already (its sleep ended: AutoRemove)
    is waited out, so the volumes are gone too when this returns."""
    remove_container(engine.api, keeper)
