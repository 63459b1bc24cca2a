"""How the stand-in's node runs a pod's container, and an exec in it: each pod under `bwrap`.

A pod gets namespaces of its own, as a container does: a PID namespace whose PID 1 is the
container's command (so `kill -9 -1` run by an exec reaches only that pod's processes, and
spares PID 1), a user namespace in which it is its `runAsUser` (mapped to the caller's uid,
with no capabilities: it cannot write a file of mode 0444), and a mount namespace whose root
is the host's read-only (`readOnlyRootFilesystem`) but for each emptyDir mount, a folder of
its own under the cluster's `volumes` folder, gone with the pod. An exec joins the pod's
namespaces (`nsenter`) as its `runAsUser`, in its working folder, with its variables.

Not emulated: the image's own filesystem (a pod sees the host's, its "image" a local folder
that is its working folder), an emptyDir's `sizeLimit` and medium, resource limits, and a
mount path inside a host folder (a mount hides the host's top-level folder it is in, and
/tmp, but for the image's folder and this Python's, bound again); bwrap's mapping makes the pod's user the caller (root in CI) on the host's files.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from tests.contract.fake_kubernetes_objects import Pod

HIDDEN = {"proc", "dev", "tmp"}  # the host's, never a pod's
NEEDS_BWRAP = "the Kubernetes stand-in runs each pod under bubblewrap, and `bwrap` is not on PATH: install it with .ci/setup-machine (or: apt-get install bubblewrap)"


class NoBwrap(RuntimeError):
    """This machine cannot run a pod: the node shows it as the container's creation error."""


def _identity(pod: Pod) -> tuple[str, str]:
    security = pod.container.get("securityContext", {})
    uid = security.get("runAsUser", 0)
    return str(uid), str(security.get("runAsGroup", uid))


def _sandbox(pod: Pod, image: Path, volumes: Path, info_fd: int) -> list[str]:
    """The bwrap command line that runs `pod`'s container (see the module docstring)."""
    container = pod.container
    uid, gid = _identity(pod)
    mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts", [])}
    hidden = HIDDEN | {path.strip("/").split("/")[0] for path in mounts}
    argv = ["bwrap", "--unshare-user", "--uid", uid, "--gid", gid, "--unshare-pid", "--as-pid-1"]
    argv += ["--die-with-parent", "--info-fd", str(info_fd), "--tmpfs", "/"]
    for entry in sorted(os.scandir("/"), key=lambda entry: entry.name):
        if entry.name in hidden:
            continue
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry.path), entry.path]
        elif entry.is_dir():
            argv += ["--ro-bind", entry.path, entry.path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--dir", "/tmp"]
    for path in sorted(mounts, key=lambda path: path.count("/")):  # a folder before a mount inside it
        folder = volumes / mounts[path]
        folder.mkdir(parents=True, exist_ok=True)
        argv += ["--bind", str(folder), path]
    # The image and this Python, where a hidden folder holds them (a checkout or venv under /tmp).
    for needed in dict.fromkeys(map(str, (image, sys.prefix, sys.base_prefix))):
        if needed.strip("/").split("/")[0] in hidden:
            argv += ["--ro-bind", needed, needed]
    if container.get("securityContext", {}).get("readOnlyRootFilesystem"):
        argv += ["--remount-ro", "/"]
    return argv


async def start_container(pod: Pod, image: Path, volumes: Path) -> None:
    """Start `pod`'s container from `image` (a local folder) with its emptyDirs under `volumes`:
    sets `pod.process` (bwrap) and `pod.pid` (its PID 1, as the host sees it)."""
    if shutil.which("bwrap") is None:
        raise NoBwrap(NEEDS_BWRAP)
    container = pod.container
    # An image's `python3` is the interpreter itself, never a shim (pyenv's, asdf's) that is PID 1
    # for a while and forks helpers: a `kill -9 -1` then kills a helper, and the shim, PID 1, exits.
    path = os.pathsep.join([os.path.dirname(os.path.realpath(sys.executable)), os.environ["PATH"]])
    pod.variables = {"PATH": path, **{v["name"]: v["value"] for v in container.get("env", [])}}
    readable, writable = os.pipe()
    try:
        pod.process = await asyncio.create_subprocess_exec(
            *_sandbox(pod, image, volumes, writable),
            "--chdir",
            str(image),
            "--",
            *container.get("command", []),
            *container.get("args", []),
            env=pod.variables,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=(writable,),
        )
    finally:
        os.close(writable)
    with os.fdopen(readable, "rb") as info:  # bwrap writes it once its PID 1 is cloned, then closes it
        found = await asyncio.to_thread(info.read)
    pod.pid = json.loads(found)["child-pid"] if found else None
    # Running once PID 1 runs the container's command: its namespaces and uid map are then set up.
    async with asyncio.timeout(10):
        while pod.pid is not None and pod.process.returncode is None and _still_bwrap(pod.pid):
            await asyncio.sleep(0.005)


def _still_bwrap(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "bwrap"
    except OSError:  # it ended
        return False


def exec_command(pod: Pod, argv: list[str]) -> list[str]:
    """The command line that runs `argv` in `pod`'s namespaces, as an exec does."""
    uid, gid = _identity(pod)
    into = ["nsenter", "--target", str(pod.pid), "--user", "--pid", "--mount", "--root", "--wd"]
    return [*into, "--setuid", uid, "--setgid", gid, "--", *argv]


def remove_volumes(volumes: Path) -> None:
    """A deleted pod's emptyDirs go with it (its processes gone, they are the only writers)."""
    shutil.rmtree(volumes, ignore_errors=True)
