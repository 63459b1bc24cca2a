"""Putting the env SDK into a container over its stdin, and the small scripts run beside it.

Why stdin: an env image needs nothing but python3, so `corral.env` must arrive at start. The
container's root filesystem is read-only, and Docker refuses `put_archive` there; a bind mount
of this checkout breaks once the server itself runs in a container (the engine sees the host's
paths, not ours); a named volume would have to be refilled whenever corral changes and shared
by every container. Instead the container runs `python3 -c BOOTSTRAP ARGS...`, which reads
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

_CORRAL_DIR = Path(__file__).resolve().parents[1]
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

# Run as root beside the env: unpack a tar read from stdin into a fresh folder under the
# scratch mount, readable by the env's user and writable by no one but root; print its path.
PUT_FILES = r"""
import io, os, sys, tarfile, tempfile
header = b""
while not header.endswith(b"\n"):
    header += os.read(0, 1)
size, data = int(header), b""
while len(data) < size:
    data += os.read(0, size - len(data))
folder = tempfile.mkdtemp(prefix="corral-files-", dir=sys.argv[1])
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(folder)
for root, dirs, files in os.walk(folder):
    os.chmod(root, 0o555)
    for name in files:
        os.chmod(os.path.join(root, name), 0o444)
print(folder)
"""

# Run as the env's user: `python3 -c RUN TIMEOUT COMMAND...`. Output goes to stdout; the only
# thing written to stderr is the word `timeout` when the command was killed at its deadline.
RUN = r"""
import contextlib, os, signal, subprocess, sys
try:
    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
except OSError as error:
    print(f"could not run {sys.argv[2]!r}: {error}", flush=True)
    sys.exit(127)
try:
    code = child.wait(float(sys.argv[1]))
except subprocess.TimeoutExpired:
    code = None
with contextlib.suppress(ProcessLookupError, PermissionError):
    os.killpg(child.pid, signal.SIGKILL)  # and whatever it left running in the background
if code is None:
    child.wait()
    sys.stderr.write("timeout")
    sys.exit(124)
sys.exit(code if code >= 0 else 128 - code)
"""
TIMED_OUT = "timeout"


def framed(payload: bytes) -> bytes:
    """`<length>\\n<payload>`: what BOOTSTRAP and PUT_FILES read from stdin."""
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
