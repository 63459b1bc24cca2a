"""What a verifier starts with, whatever the agent left: the platform's settings, never its.

A command verifier runs on a copy of what the agent left, and the agent had a shell there. So
the programs verification runs must load no code from the agent's places: Python started for
verification ignores user site folders (and the `.pth` files in them), puts neither the
working folder nor the script's folder first on its path, and reads no bytecode cache but its
own (there is none: caches go nowhere). The agent's state enters as data only. Every provider
builds a verifier's environment with `pristine_environment` and leaves bytecode out of the
copies it makes (`BYTECODE`).

An interpreter started with `-I` or `-E` ignores these variables; `-I` itself does the first
two, and the copies hold no bytecode to read.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

from corral.sandboxes.shared.trees import remove_tree, walk

# No process can make this folder (/dev/null is not one), so no cache is read from it or
# written to it: every module is compiled from its source.
NO_BYTECODE_CACHE = "/dev/null/corral-no-bytecode"
PYTHON_SETTINGS = {
    "PYTHONNOUSERSITE": "1",  # no ~/.local/lib/pythonX.Y/site-packages, nor its .pth files
    "PYTHONSAFEPATH": "1",  # `python -m pytest` does not import ./pytest.py (3.11+)
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONPYCACHEPREFIX": NO_BYTECODE_CACHE,  # __pycache__ folders next to the sources are not read
    "PYTHONUNBUFFERED": "1",
}
# Variables a loader, an interpreter or a shell reads code or settings from as it starts: set
# by an image, one names a file the agent may have written (nvm's BASH_ENV in its home), run
# before any test. The tests get them only from the task itself (docker.whole_image.search_path).
STARTUP = (
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND", "PS4", "GCONV_PATH",
    "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONWARNINGS", "PYTHONEXECUTABLE",
    "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "PERLLIB",
    "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_PARAMETERS", "GIT_EXEC_PATH", "XDG_CONFIG_HOME",
)  # fmt: skip
STARTUP_PREFIXES = ("LD_", "GLIBC_", "BASH_FUNC_", "MALLOC_")


def starts_code(name: str) -> bool:
    """Whether a variable named `name` makes a program load or run something as it starts."""
    return name in STARTUP or name.startswith(STARTUP_PREFIXES)


def startup_emptied(image_env: Mapping[str, str], ours: Mapping[str, str]) -> dict[str, str]:
    """The variables of an image's ENV (`image_env`) that start code (`starts_code`) and the
    task does not set itself (`ours`), each empty: what a verifier's process gets over the
    image's, as the engine cannot unset an image's variable and each of them empty means none."""
    return {key: "" for key in sorted(image_env) if key not in ours and starts_code(key)}


# Left out of every copy of the agent's folders: compiled code it may have written to be run
# in place of the sources the verifier reads (a stale cache, a sourceless module).
BYTECODE = ("__pycache__", "*.pyc", "*.pyo")


def pristine_environment(environment: Mapping[str, str], *, home: str) -> dict[str, str]:
    """`environment` (the task author's and the provider's: the agent sets none of it) for a
    verifier's process, with corral's Python settings over it and `home`, a folder the agent
    never wrote, as HOME. A task whose tests import from the working folder says so with
    PYTHONPATH in its verifier's environment, which stays."""
    return {**environment, **PYTHON_SETTINGS, "HOME": home}


def remove_bytecode(folder: Path) -> int:
    """Remove from `folder` (a verifier's copy) every file and folder named as `BYTECODE`,
    following no link; how many went. A link so named goes as a link."""
    removed = 0
    for root, folders, files in walk(folder):
        for name in [*folders, *files]:
            if not any(fnmatch.fnmatch(name, pattern) for pattern in BYTECODE):
                continue
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                remove_tree(Path(path))
                folders.remove(name)
            else:
                os.unlink(path)
            removed += 1
    return removed
