"""Putting the env SDK into a container (docker, modal) over its stdin.

Why stdin: an env image needs nothing but python3, so `corral.env` must arrive at start. A
docker container's root filesystem is read-only, and Docker refuses `put_archive` there; a
bind mount of this checkout breaks once the server itself runs in a container (the engine sees
the host's paths, not ours); a named volume would have to be refilled whenever corral changes
and shared by every container; a Modal image would have to be rebuilt. Instead the container runs `python3 -c BOOTSTRAP ARGS...`, which reads
`<length>\\n<zip of corral/env and corral/errors.py>` from stdin with exact-length reads (so
not one byte of the protocol that follows is swallowed), imports the SDK from memory and runs
`corral.env` as `python3 -m corral.env ARGS...` would. Nothing is written anywhere, and a warm
container gets its SDK before its episode is known, so a reset pays nothing for it.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

_CORRAL_DIR = Path(__file__).resolve().parents[2]
# What an env process imports of corral, all standard library only: the SDK, and the errors it raises.
_SDK_DIR = _CORRAL_DIR / "env"
_ERRORS = _CORRAL_DIR / "errors.py"

# `-c` code: read the SDK, import it from memory, then `python3 -m corral.env` with our argv.
BOOTSTRAP = r"""
import importlib.abc, importlib.util, io, os, runpy, sys, zipfile
def take(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)  # the server went away before sending the SDK
        data += chunk
    return data
header = b""
while not header.endswith(b"\n"):
    header += take(1)
sdk = zipfile.ZipFile(io.BytesIO(take(int(header))))
sources = {name[:-3].replace("/", "."): sdk.read(name) for name in sdk.namelist() if name.endswith(".py")}
class Sdk(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    def find_spec(self, name, path=None, target=None):
        if name + ".__init__" in sources or name in sources:
            return importlib.util.spec_from_loader(name, self, origin=self._origin(name), is_package=self.is_package(name))
    def is_package(self, name):
        return name + ".__init__" in sources
    def _origin(self, name):
        return "<corral-sdk>/" + (name + ".__init__" if self.is_package(name) else name).replace(".", "/") + ".py"
    def get_source(self, name):
        return sources[name + ".__init__" if self.is_package(name) else name].decode()
    def get_code(self, name):
        return compile(self.get_source(name), self._origin(name), "exec")
sys.meta_path.insert(0, Sdk())
runpy.run_module("corral.env", run_name="__main__", alter_sys=True)
"""


def framed(payload: bytes) -> bytes:
    """`<length>\\n<payload>`: what BOOTSTRAP reads from stdin."""
    return b"%d\n" % len(payload) + payload


@functools.cache
def sdk_payload() -> bytes:
    """The framed zip of `corral/env` and `corral/errors.py` that BOOTSTRAP reads (built once
    per server)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("corral/__init__.py", "")  # a plain package in the container
        archive.write(_ERRORS, "corral/errors.py")
        for path in sorted(_SDK_DIR.glob("*.py")):
            archive.write(path, f"corral/env/{path.name}")
    return framed(buffer.getvalue())


def bootstrapped(command: tuple[str, ...]) -> tuple[str, ...] | None:
    """`python3 -m corral.env ARGS` as `python3 -c BOOTSTRAP ARGS`; None for any other command
    (an env with its own `command` brings its own runtime, and gets no SDK)."""
    if len(command) >= 3 and command[1:3] == ("-m", "corral.env") and Path(command[0]).name.startswith("python"):
        return (command[0], "-c", BOOTSTRAP, *command[3:])
    return None
