"""A stand-in for the `modal` package whose sandboxes are local processes: the modal provider's
own logic (streams, tags, the reaper, the lease, the image cache, warm pools) runs against it
on a machine that cannot reach Modal's cloud.

What keeps it honest: every call the provider makes is recorded, and
`test_modal_fake.py` binds each one to the real `modal` package's signature (a renamed or
misspelt argument fails there). Its sandboxes run the env's real command (corral's bootstrap
and runtime included), Modal's stdout arrives as text chunks and its stdin refuses more than
2 MB between drains, as Modal's do. What it cannot show: Modal's cloud itself (its images,
limits, network policy, exec); `exec` is refused, so the verifier's tests leave it out.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import inspect
import operator
import os
import signal
import types
import uuid
from pathlib import Path
from typing import Any, ClassVar

import modal
import modal.exception

STDIN_LIMIT = 2 * 1024 * 1024  # modal.io_streams.MAX_BUFFER_SIZE
CALLS: list[tuple[str, tuple, dict]] = []  # (the real API's dotted name, args, kwargs)


class _Api:
    """A method of the fake API, called as modal's are (`.aio` for the async ones, or plainly),
    recorded under the real API's dotted name."""

    def __init__(self, function, *, real: str | None = None):
        self.function = function
        self.real = real

    def __set_name__(self, owner, name):
        self.real = self.real or f"{owner.REAL}.{name}"

    def __get__(self, instance, owner):
        function = self.function.__get__(instance, owner) if instance is not None else self.function
        return _Bound(function, self.real)


class _Bound:
    def __init__(self, function, real: str):
        self._function, self._real = function, real

    def aio(self, *args, **kwargs):
        CALLS.append((self._real, args, kwargs))
        return self._function(*args, **kwargs)  # a coroutine, or an async generator (Sandbox.list)

    def __call__(self, *args, **kwargs):
        CALLS.append((self._real, args, kwargs))
        result = self._function(*args, **kwargs)
        assert not inspect.isawaitable(result), f"{self._real} is async in this fake: call .aio"
        return result


def api(function=None, *, static: bool = False):
    def wrap(f):
        return _Api(staticmethod(f).__func__ if static else f)

    return wrap(function) if function is not None else wrap


class App:
    REAL = "modal.App"

    def __init__(self, name: str):
        self.name, self.app_id = name, f"ap-{name}"

    @api(static=True)
    async def lookup(name: str, *, client=None, environment_name=None, create_if_missing: bool = False) -> App:
        return App(name)


class Image:
    REAL = "modal.Image"
    built: ClassVar[dict[str, Image]] = {}
    builds: ClassVar[int] = 0

    def __init__(self, context_dir: Path | None, source: str):
        self.context_dir, self.source, self.object_id = context_dir, source, None

    @api(static=True)
    def from_dockerfile(path, *, context_dir=None, ignore=None, **options) -> Image:
        return Image(Path(context_dir), f"dockerfile:{path}")

    @api(static=True)
    def from_registry(tag, secret=None, **options) -> Image:
        return Image(None, f"registry:{tag}")

    @api(static=True)
    def from_id(image_id: str, client=None) -> Image:
        return Image.built[image_id]

    @api
    async def build(self, app=None) -> Image:
        Image.builds += 1
        self.object_id = f"im-{uuid.uuid4().hex[:8]}"
        Image.built[self.object_id] = self
        return self


class Dict:
    REAL = "modal.Dict"
    named: ClassVar[dict[str, dict]] = {}  # the cloud's: they outlive every provider

    def __init__(self, data: dict):
        self.data = data

    @api(static=True)
    def from_name(name: str, *, environment_name=None, create_if_missing: bool = False, client=None) -> Dict:
        return Dict(Dict.named.setdefault(name, {}))

    @api
    async def get(self, key, default=None):
        return self.data.get(key, default)

    @api
    async def put(self, key, value, *, skip_if_exists: bool = False) -> bool:
        if skip_if_exists and key in self.data:
            return False
        self.data[key] = value
        return True

    @api
    async def pop(self, key):
        return self.data.pop(key)


class StreamWriter:
    REAL = "modal.io_streams.StreamWriter"

    def __init__(self, process: asyncio.subprocess.Process):
        self._process, self._buffer, self._eof = process, bytearray(), False

    @api
    def write(self, data) -> None:
        if self._eof:
            raise ValueError("Stdin is closed. Cannot write to it.")
        if len(self._buffer) + len(data) > STDIN_LIMIT:
            raise BufferError("Buffer size exceed limit. Call drain to flush the buffer.")
        self._buffer.extend(data)

    @api
    def write_eof(self) -> None:
        self._eof = True

    @api
    async def drain(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
            if self._eof:
                self._process.stdin.close()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise modal.exception.InvalidError(f"the sandbox has finished: {error}") from None


class StreamReader:
    """Text chunks, as Modal's sandbox logs arrive; the iteration ends at end-of-file."""

    def __init__(self, stream: asyncio.StreamReader):
        self._stream = stream

    async def __aiter__(self):
        decoder = codecs.getincrementaldecoder("utf-8")()
        while chunk := await self._stream.read(65536):
            if text := decoder.decode(chunk):
                yield text


class Sandbox:
    REAL = "modal.Sandbox"
    live: ClassVar[dict[str, Sandbox]] = {}
    created: ClassVar[list[dict]] = []  # the keyword arguments of every create

    def __init__(self, process: asyncio.subprocess.Process, app: App):
        self.object_id = f"sb-{uuid.uuid4().hex[:8]}"
        self._process, self._app, self._tags = process, app, {}
        self.stdin = StreamWriter(process)
        self.stdout = StreamReader(process.stdout)
        self.stderr = StreamReader(process.stderr)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @api(static=True)
    async def create(
        *args: str,
        app=None,
        image=None,
        env=None,
        timeout=300,
        cpu=None,
        memory=None,
        block_network: bool = False,
        **options,
    ) -> Sandbox:
        Sandbox.created.append(
            {
                "args": args,
                "app": app,
                "image": image,
                "env": env,
                "timeout": timeout,
                "cpu": cpu,
                "memory": memory,
                "block_network": block_network,
                **options,
            }
        )
        environment = {"PATH": os.environ["PATH"], "HOME": str(image.context_dir), **(env or {})}
        process = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=image.context_dir,
            env=environment,
            start_new_session=True,
        )
        sandbox = Sandbox(process, app)
        Sandbox.live[sandbox.object_id] = sandbox
        return sandbox

    @api(static=True)
    async def list(*, app_id=None, tags=None, client=None):
        for sandbox in list(Sandbox.live.values()):
            if (app_id is None or sandbox._app.app_id == app_id) and (tags or {}).items() <= sandbox._tags.items():
                yield sandbox

    @api
    async def set_tags(self, tags: dict, *, client=None) -> None:
        self._tags = dict(tags)

    @api
    async def get_tags(self) -> dict:
        return dict(self._tags)

    @api
    async def terminate(self, *, wait: bool = False):
        Sandbox.live.pop(self.object_id, None)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        # Its pipes closed here, not waited for: asyncio's wait() also waits for them to
        # close, which a killed process's unread stdout never does once its reader is gone.
        self._process._transport.close()

    @api
    async def exec(self, *args, **options):
        raise NotImplementedError("the fake runs no commands in its sandboxes: the verifier's tests need Modal")


class Config:
    def __init__(self, values: dict[str, str]):
        self.values = values

    def get(self, key: str, *args, **kwargs) -> Any:
        return self.values.get(key)


def fake_modal(credentials: dict[str, str] | None = None) -> types.SimpleNamespace:
    """A `modal` namespace with this module's classes; `credentials` as Modal's config reads them."""
    config = types.SimpleNamespace(config=Config(credentials or {}), user_config_path="/root/.modal.toml")
    return types.SimpleNamespace(
        App=App, Image=Image, Dict=Dict, Sandbox=Sandbox, config=config, exception=modal.exception
    )


def calls_modal_refuses() -> list[str]:
    """Every call recorded so far that the real `modal` package's signature does not take."""
    refused = []
    for name, args, kwargs in CALLS:
        real = operator.attrgetter(name.removeprefix("modal."))(modal)
        signature = inspect.signature(real)
        unbound = (None,) if next(iter(signature.parameters), None) in ("self", "cls") else ()
        try:
            signature.bind(*unbound, *args, **kwargs)
        except TypeError as error:
            refused.append(f"{name}(*{args!r}, **{kwargs!r}): {error} (modal {modal.__version__})")
    return refused


def reset_cloud() -> None:
    """Forget every sandbox, image and dict: a fresh cloud for the next test."""
    for sandbox in list(Sandbox.live.values()):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sandbox._process.pid, signal.SIGKILL)
    Sandbox.live.clear()
    Sandbox.created.clear()
    Image.built.clear()
    Image.builds = 0
    Dict.named.clear()
    CALLS.clear()
