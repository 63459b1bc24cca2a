"""How the `corral` command stops when it cannot do what it was asked: a mistake in how it was
called (an unknown sandbox, a port in use, a bundle folder that is not there) is one line on
stderr saying what to do, and exit status 2; a bundle with problems lists them all, and exit
status 1."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import typer

from corral.errors import AuthError, BundleInvalid, ConfigError, CorralError
from corral.sandboxes import KINDS, NETWORK_POLICIES
from corral.server.bundles.problems import merge_shared, problems_of
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle

USAGE_ERROR = 2  # the exit status of a mistake in how corral was called


def open_or_exit(bundle: Path, options: ServeOptions) -> ServedBundle:
    """The bundle, checked and served with `options`; exit 1 listing every problem of a bundle
    with problems, exit 2 (one line) for a setting that cannot work (no Docker engine...). An
    image build's lines go to stderr as they come: a first build takes a while."""
    try:
        return asyncio.run(ServedBundle.open(bundle, options, progress=lambda line: typer.echo(line, err=True)))
    except BundleInvalid as error:
        # Problems the env checks added after loading are merged too: one line per shared problem.
        typer.echo(str(BundleInvalid(bundle, merge_shared(problems_of(error)))), err=True)
        raise typer.Exit(1) from None
    except ConfigError as error:
        fail(str(error))


def refuse_bad_call(bundle: Path, sandbox: str, network: str | None = None) -> None:
    """Exit 2, in one line, for an unknown sandbox or network policy, or a bundle folder that is not there."""
    if sandbox not in KINDS:
        fail(f"unknown --sandbox {sandbox!r}; choose one of: {', '.join(KINDS)}")
    if network not in (None, *NETWORK_POLICIES):
        fail(f"unknown --network {network!r}; choose one of: {', '.join(NETWORK_POLICIES)}")
    if not bundle.is_dir():
        fail(
            f"no bundle folder at {bundle}; give the folder that holds bundle.toml, or write one with: corral init NAME"
        )


def refuse_bad_target(target: str, sandbox: str) -> None:
    """`refuse_bad_call` for a target that is a bundle folder; a server's URL is for it to judge."""
    if not target.startswith(("http://", "https://")):
        refuse_bad_call(Path(target), sandbox)


@contextlib.contextmanager
def exits_on_refusal(target: str) -> Iterator[None]:
    """Around a command that plays `target` (a bundle folder or a server's URL): exit 1 listing a
    bundle's problems, exit 2 (one line) for a wrong token, a server that is not there, a task
    the bundle lacks."""
    try:
        yield
    except BundleInvalid as error:
        typer.echo(str(BundleInvalid(target, merge_shared(problems_of(error)))), err=True)
        raise typer.Exit(1) from None
    except AuthError as error:
        fail(str(error.passed_as("--token TOKEN")))
    except CorralError as error:
        fail(str(error))


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for the server to listen on; exit 2 saying why when it cannot be."""
    listener = None
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        listener.bind(address)
    except OSError as error:
        if listener is not None:
            listener.close()
        if error.errno == errno.EADDRINUSE:
            fail(
                f"port {port} on {host} is in use (another corral serve?); stop what listens there, or serve with --port {port + 1}"
            )
        fail(f"cannot listen on {host}:{port} ({error.strerror or error}); serve with another --host or --port")
    return listener


def fail(message: str) -> NoReturn:
    """Stop the command with `message` on stderr as one line, exit status 2 (a mistake in the call)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USAGE_ERROR)
