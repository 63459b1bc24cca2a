"""Where a Harbor task's tests look for programs and modules: never where its agent could write.

The tests find `bash`, `python3` and `pytest` through PATH, and Python finds modules through
PYTHONPATH, both as the task's image sets them. An image may list a folder there that its
non-root agent can write (`ENV PATH=/home/worker/.local/bin:$PATH`, for tools installed as
that user): the agent's own `python3` there, exiting 0, would then be the tests' verdict. So
before the tests start, each folder of those two lists is checked in the keeper (the task's
image as built, docker.whole_image.keeper) by the agent's user: a folder it could write in, or make, or
replace (it or a folder above it is writable by that user), is left off the tests' list, and
the tests' output says so. A task's `[verifier] env` that sets either list chooses on purpose
(`PYTHONPATH=/app` for tests that import the agent's code): that list is kept as it is.

Every other variable the image sets is judged as well: one that makes a program load or run
code as it starts (BASH_ENV, LD_PRELOAD, PYTEST_ADDOPTS, NODE_OPTIONS: pristine.STARTUP) is
set empty for the tests whoever the agent is (the engine cannot unset an image's variable, and
each of them empty means none), and one whose value names a path the agent could write in,
make or replace (JAVA_HOME=/home/worker/jdk) is set empty too; the locale's, TERM and TZ are
kept. The task's own settings (its `[verifier] env`, its environment) are kept as they are.
So an image's ENV is part of its tests' trust base only as far as the agent cannot reach it.

Python also imports from its own site folders, which no setting takes off its path: where the
agent added or changed anything in one (a `.pth` file there runs at every start), the tests do
not run and fail, saying so. A task whose agent runs as root could change every folder, and
its tests' own programs: that is the limit `corral check` notes for such tasks, not handled here.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.errors import SandboxError
from corral.sandboxes.docker.engine import Engine
from corral.sandboxes.docker.execs import Exec
from corral.sandboxes.docker.whole_image.keeper import KEEPER_USER
from corral.sandboxes.shared.pristine import startup_emptied

SEARCHED = ("PATH", "PYTHONPATH")
KEPT = ("HOME", "LANG", "LANGUAGE", "TERM", "TZ")  # and LC_*: they name no code
# The absolute paths a value names: whole, or after a separator (JAVA_OPTS="-Dx=/home/a").
PATHS = re.compile(r"(?:^|[\s:=,;'\"])(/[^\s:=,;'\"]*)")
# Each argument the agent's user may write in, NUL-terminated. The keeper's /bin/sh is the
# image's as built: the agent never ran in that container.
WRITABLE = 'for p do if [ -w "$p" ]; then printf "%s\\0" "$p"; fi; done'
CHECK_TIMEOUT_S = 30.0
# The folders the tests' python3 imports from by itself (its standard library, its site
# folders), as the image's own python3 says with -I, run by nobody in the keeper.
SYS_PATH = (
    "command -v python3 >/dev/null || exit 0; "
    'exec python3 -I -c "import sys; print(*filter(None, sys.path), sep=chr(0), end=chr(0))"'
)


def search_lists(image_env: Sequence[str], overrides: Mapping[str, str]) -> dict[str, str]:
    """PATH and PYTHONPATH as the tests would see them: the image's `KEY=value` list, under
    the task's own settings (`overrides`); absent ones are left out."""
    found = dict(item.partition("=")[::2] for item in image_env)
    found.update(overrides)
    return {key: found[key] for key in SEARCHED if key in found}


async def out_of_reach(
    engine: Engine, keeper: str, agent_user: str, lists: Mapping[str, str], workdir: str
) -> tuple[dict[str, str], list[str]]:
    """`lists` less every folder `agent_user` could write in, make or replace, judged in the
    `keeper` container (relative entries count from `workdir`): (the lists, the folders left off)."""
    folders = {
        entry: posixpath.normpath(posixpath.join(workdir or "/", entry or "."))
        for value in lists.values()
        for entry in value.split(":")
    }
    asked = sorted({above for folder in folders.values() for above in _self_and_ancestors(folder)})
    check = await Exec.start(
        engine, keeper, ["/bin/sh", "-c", WRITABLE, "corral-path", *asked], user=agent_user, workdir="/"
    )
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


@dataclass(frozen=True)
class SearchPath:
    """What the tests of one commit get: `environment` (PATH and PYTHONPATH, where they must
    change), the folders `left_off` them, and what the agent `planted` where their Python
    imports from (then the tests do not run)."""

    environment: dict[str, str] = field(default_factory=dict)
    left_off: list[str] = field(default_factory=list)
    planted: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)  # the image's variables set empty for the tests
    agent: str = "root"  # the agent's user, as the engine takes it


async def for_the_tests(
    engine: Engine, image: str, keeper: str, config: Mapping, overrides: Mapping[str, str], changed: Iterable[dict]
) -> SearchPath:
    """The SearchPath of the tests of `image` (the commit of the agent's container, made with
    `config`; `overrides`: the task's verifier settings; `changed`: the engine's diff of that
    container); nothing where the agent ran as root (see the module docstring)."""
    info = (await engine.call(engine.api.inspect_image, image))["Config"]
    image_env = dict(item.partition("=")[::2] for item in info.get("Env") or [])
    ours = {**config["environment"], **overrides}
    # Each judged by what it is, not where: the task's own settings are its choice.
    others = {key: value for key, value in image_env.items() if key not in ours and key not in SEARCHED}
    emptied = list(startup_emptied(others, ours))
    agent = config["user"] or info.get("User") or "root"
    if agent.split(":")[0] in ("root", "0"):
        return SearchPath({key: "" for key in emptied}, emptied=emptied, agent=agent)
    # The task's [verifier] env names what its tests search on purpose (PYTHONPATH=/app: they
    # import the agent's code): that is kept as it is; the image's own lists are judged.
    chosen = {key: value for key, value in overrides.items() if key in SEARCHED}
    lists = {
        key: value
        for key, value in search_lists(info.get("Env") or [], config["environment"]).items()
        if key not in chosen
    }
    named = {
        key: ":".join(PATHS.findall(value))
        for key, value in others.items()
        if key not in emptied and key not in KEPT and not key.startswith("LC_") and PATHS.search(value)
    }
    kept, reached = await out_of_reach(
        engine, keeper, agent, {**lists, **named}, config.get("working_dir") or info.get("WorkingDir") or "/"
    )
    emptied = sorted([*emptied, *(key for key in named if kept[key] != named[key])])
    kept = {key: kept[key] for key in lists}
    folders = await _python_path(engine, keeper, chosen.get("PATH", kept.get("PATH", "")))
    planted = sorted(
        entry["Path"]
        for entry in changed
        if entry.get("Kind") in (0, 1)
        and "__pycache__" not in entry["Path"]
        and any(entry["Path"] == folder or entry["Path"].startswith(folder + "/") for folder in folders)
    )
    searched = kept if any(kept[key] != lists[key] for key in lists) else {}
    left_off = [entry for entry in reached if any(entry in value.split(":") for value in lists.values())]
    return SearchPath({**searched, **{key: "" for key in emptied}}, left_off, planted, emptied, agent)


async def _python_path(engine: Engine, keeper: str, path: str) -> list[str]:
    """The import path of the image's python3 on `path` (none: no folder), as it is before any
    setting: its standard library and site folders, the agent's own site folder left out."""
    run = await Exec.start(
        engine, keeper, ["/bin/sh", "-c", SYS_PATH], user=KEEPER_USER, workdir="/", environment={"PATH": path}
    )
    code, output = await run.output(timeout_s=CHECK_TIMEOUT_S, keep=1 << 16)
    if code != 0:
        raise SandboxError(f"could not list the tests' Python folders in the task's image: {run.stderr_tail() or code}")
    return [folder.rstrip("/") for folder in output.split("\0") if folder.startswith("/")]
