"""Where a Harbor task's tests look for programs and modules: never where its agent could write.

The tests find `bash`, `python3` and `pytest` through PATH, and Python finds modules through
PYTHONPATH, both as the task's image sets them. An image may list a folder there that its
non-root agent can write (`ENV PATH=/home/worker/.local/bin:$PATH`, for tools installed as
that user): the agent's own `python3` there, exiting 0, would then be the tests' verdict. So
before the tests start, each folder of those two lists is checked in the keeper (the task's
image as built, docker_keeper) by the agent's user: a folder it could write in, or make, or
replace (it or a folder above it is writable by that user), is left off the tests' list, and
the tests' output says so. A task whose agent runs as root could change every folder, and its
tests' own programs: that is the limit `corral check` notes for such tasks, not handled here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from corral.errors import SandboxError
from corral.sandboxes.docker_engine import Engine
from corral.sandboxes.docker_exec import Exec

SEARCHED = ("PATH", "PYTHONPATH")
# Each argument the agent's user may write in, NUL-terminated. The keeper's /bin/sh is the
# image's as built: the agent never ran in that container.
WRITABLE = 'for p do if [ -w "$p" ]; then printf "%s\\0" "$p"; fi; done'
CHECK_TIMEOUT_S = 30.0


def search_lists(image_env: Sequence[str], overrides: Mapping[str, str]) -> dict[str, str]:
    """PATH and PYTHONPATH as the tests would see them: the image's `KEY=value` list, under
    the task's own settings (`overrides`); absent ones are left out."""
    found = dict(item.partition("=")[::2] for item in image_env)
    found.update(overrides)
    return {key: found[key] for key in SEARCHED if key in found}


async def out_of_reach(engine: Engine, keeper: str, agent_user: str, lists: Mapping[str, str],
                       workdir: str) -> tuple[dict[str, str], list[str]]:
    """`lists` less every folder `agent_user` could write in, make or replace, judged in the
    `keeper` container (relative entries count from `workdir`): (the lists, the folders left off)."""
    folders = {entry: posixpath.normpath(posixpath.join(workdir or "/", entry or "."))
               for value in lists.values() for entry in value.split(":")}
    asked = sorted({above for folder in folders.values() for above in _self_and_ancestors(folder)})
    check = await Exec.start(engine, keeper, ["/bin/sh", "-c", WRITABLE, "corral-path", *asked], user=agent_user, workdir="/")
    code, output = await check.output(timeout_s=CHECK_TIMEOUT_S, keep=len("\0".join(asked)) + 1)
    if code != 0:
        raise SandboxError(f"could not check the tests' PATH in the task's image: {check.stderr_tail() or code}")
    writable = set(output.split("\0"))
    reached = [entry for entry, folder in folders.items() if writable.intersection(_self_and_ancestors(folder))]
    kept = {key: ":".join(entry for entry in value.split(":") if entry not in reached) for key, value in lists.items()}
    return kept, reached


def _self_and_ancestors(folder: str) -> list[str]:
    """The folder and every folder above it: one the agent may write in lets it replace what is below."""
    found = [folder]
    while folder != "/":
        folder = posixpath.dirname(folder)
        found.append(folder)
    return found


async def for_the_tests(engine: Engine, image: str, keeper: str, config: Mapping,
                        overrides: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The PATH and PYTHONPATH to give the tests of `image` (the commit of the agent's
    container, made with `config`; `overrides`: the task's verifier settings), where they must
    change, and the folders left off; nothing where the agent ran as root (see the module docstring)."""
    info = (await engine.call(engine.api.inspect_image, image))["Config"]
    agent = config["user"] or info.get("User") or ""
    if agent.split(":")[0] in ("", "root", "0"):
        return {}, []
    lists = search_lists(info.get("Env") or [], {**config["environment"], **overrides})
    if not lists:
        return {}, []
    kept, reached = await out_of_reach(engine, keeper, agent, lists, config.get("working_dir") or info.get("WorkingDir") or "/")
    return (kept if reached else {}), reached
