"""What a local env imports and sees of this machine's files: its folder and corral's SDK (as
root, copies that every episode's uid can read), and the installation of a program its command
names by an absolute path. The local provider starts every env with these (see local)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from corral.sandboxes.base import SandboxSpec
from corral.sandboxes.local.namespace import SYSTEM_FOLDERS
from corral.sandboxes.runtime_dirs import private_folder

# The folder that holds the `corral` namespace with the env SDK (corral/env and the
# corral/errors.py it raises from), put on the env's import path so `python3 -m corral.env`
# works without installing anything.
SDK_ROOT = Path(__file__).resolve().parents[3]


class EnvFiles:
    """Each env's folder and SDK: the originals, or the readable copies made of them."""

    def __init__(self) -> None:
        self.copies: dict[SandboxSpec, tuple[Path, Path]] = {}  # the env's folder and the SDK, readable by all

    def import_path(self, spec: SandboxSpec) -> list[Path]:
        """The env's PYTHONPATH: its folder, then the folder that holds corral's SDK."""
        return list(self.copies.get(spec, (spec.context_dir, SDK_ROOT)))

    def visible(self, spec: SandboxSpec) -> list[Path]:
        """What an env's namespace sees read-only besides the system: its folder, corral's SDK
        (the env package and errors.py alone, not the rest of corral), and the installation of
        a program its command names by an absolute path (installation_of)."""
        env, sdk = self.import_path(spec)
        return [env, sdk / "corral" / "env", sdk / "corral" / "errors.py", *installation_of(spec.command[0])]

    def with_original_paths(self, spec: SandboxSpec, text: str) -> str:
        """`text` (an env's stderr) with the paths of `spec`'s copies made the originals': a
        traceback then points at the bundle's file, the one to fix, not at its copy."""
        if spec not in self.copies:
            return text
        env_copy, sdk_copy = self.copies[spec]
        return text.replace(str(env_copy), str(spec.context_dir)).replace(str(sdk_copy), str(SDK_ROOT))

    def copy_readable(self, spec: SandboxSpec, shared: Path) -> None:
        """Copy the env's folder and corral's SDK into `shared`, readable by every user; an
        edit of the originals takes effect on the next server's start, as with docker's images."""
        private_folder(shared, 0o755)
        target = shared / f"{spec.env_name}-{uuid.uuid4().hex[:8]}"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
        shutil.copytree(spec.context_dir, target / "env", ignore=ignore)
        shutil.copytree(SDK_ROOT / "corral" / "env", target / "sdk" / "corral" / "env", ignore=ignore)
        shutil.copy(SDK_ROOT / "corral" / "errors.py", target / "sdk" / "corral" / "errors.py")
        for root, _, files in os.walk(target):
            os.chmod(root, 0o755)
            for name in files:
                path = os.path.join(root, name)
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)
        self.copies[spec] = (target / "env", target / "sdk")


def installation_of(program: str) -> list[Path]:
    """The folders a program named by its absolute path needs to run in a namespace, outside
    the system's: the installation it sits in (the folder above its `bin/`, else its own), and
    that of the file it links to. So `/venv/bin/python` brings its virtualenv and the
    interpreter that links to; `python3` (looked up on PATH) brings nothing."""
    if not os.path.isabs(program):
        return []
    found = []
    for path in dict.fromkeys((Path(program), Path(os.path.realpath(program)))):
        top = path.parent.parent if path.parent.name == "bin" else path.parent
        if not any(top.is_relative_to(folder) for folder in SYSTEM_FOLDERS) and top != Path("/"):
            found.append(top)
    return found
