"""The `corral` command: start a bundle, check it, build its images, serve it.

A mistake in how it is called (an unknown sandbox, a port in use, a bundle folder that is not
there) is one line on stderr saying what to do, and exit status 2; a bundle with problems
lists them all, and exit status 1.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import logging
import os
import socket
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import uvicorn

from corral.errors import BundleInvalid, ConfigError, ImageError
from corral.sandboxes import KINDS, make_provider
from corral.server.app import create_app
from corral.server.bundle import TRAIN_SPLIT, load_bundle, merge_shared
from corral.server.checks import sandbox_spec
from corral.server.scaffold import starter_files, write_starter
from corral.server.served import ServedBundle, ServeOptions, default_instance

app = typer.Typer(
    help="corral: serve bundles of agent tasks as live environments for RL trainers.",
    no_args_is_help=True,
    add_completion=False,
)

BundleArg = Annotated[Path, typer.Argument(help="The bundle folder (it holds bundle.toml).", show_default=False)]
USAGE_ERROR = 2  # the exit status of a mistake in how corral was called


def _version(show: bool) -> None:
    if show:
        typer.echo(f"corral {importlib.metadata.version('corral')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print corral's version and exit.")] = False,
) -> None:
    pass


@app.command()
def init(
    name: Annotated[str, typer.Argument(help="The bundle's name, and its folder's.", show_default=False)],
    path: Annotated[Path, typer.Option(help="The folder to write the bundle's folder in.")] = Path("."),
) -> None:
    """Write a bundle to start from: an env with two tools, three tasks, an eval split, a verifier."""
    try:
        root = write_starter(name, path)
    except ConfigError as error:
        _fail(str(error))
    shown = os.path.relpath(root)
    typer.echo(f"wrote the bundle {name}:")
    for file in starter_files():
        typer.echo(f"  {os.path.join(shown, file)}")
    typer.echo("next:")
    typer.echo(f"  corral check {shown}    # every problem at once, each with its fix")
    typer.echo(f"  corral serve {shown}    # then play it from Python: see {os.path.join(shown, 'README.md')}")


@app.command()
def check(
    bundle: BundleArg,
    sandbox: Annotated[str, typer.Option(help="Where to start each env once to list its tools: auto (docker when an engine answers, else local, as serve picks), docker or local.")] = "auto",
) -> None:
    """List every problem of a bundle at once, each with its file and fix; exit 1 if any."""
    _refuse_bad_call(bundle, sandbox)
    served = _open_or_exit(bundle, ServeOptions(sandbox=sandbox))
    asyncio.run(served.aclose())
    typer.echo(summary(served))


@app.command()
def serve(
    bundle: BundleArg,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 to serve trainers on other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    sandbox: Annotated[str, typer.Option(help="Where episodes run: auto (docker when an engine answers, else local), docker (a hardened container each) or local (a child process each; no isolation).")] = "auto",
    warm_pool: Annotated[int, typer.Option(
        envvar="CORRAL_WARM_POOL", min=0,
        help="docker: started containers kept waiting per env, so a reset skips the container start.")] = 0,
    instance: Annotated[str | None, typer.Option(
        envvar="CORRAL_INSTANCE",
        help="docker: this server's name on its containers; on start it removes what a killed run of the same name left (default: HOSTNAME-PORT).")] = None,
    max_concurrent_envs: Annotated[int, typer.Option(
        envvar="MAX_CONCURRENT_ENVS", min=1,
        help="Sessions allowed at once; a trainer holds one per rollout it generates at once.")] = 8,
    reward: Annotated[str | None, typer.Option(help="The score id that is the reward, for tasks that record several scores.")] = None,
    tool_timeout: Annotated[float | None, typer.Option(help="Seconds one tool call may take before its episode ends unscored (default: the bundle's, else 60).")] = None,
    reset_timeout: Annotated[float | None, typer.Option(help="Seconds a reset (deploy and task load) or an end_turn may take (default: the bundle's, else 600).")] = None,
    token: Annotated[str | None, typer.Option(envvar="CORRAL_TOKEN", help="Require 'Authorization: Bearer TOKEN' on every request.")] = None,
) -> None:
    """Serve every task of a bundle over OpenEnv's WebSocket protocol and Task API."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options = ServeOptions(
        sandbox=sandbox, max_concurrent_envs=max_concurrent_envs, reward=reward,
        tool_timeout_s=tool_timeout, reset_timeout_s=reset_timeout, token=token,
        warm_pool=warm_pool, instance=instance or default_instance(port),
    )
    _refuse_bad_call(bundle, sandbox)
    listener = _listen(host, port)  # before the bundle is opened: a port in use is known at once
    try:
        served = _open_or_exit(bundle, options)
    except BaseException:
        listener.close()
        raise
    typer.echo(summary(served))
    sandboxes = served.provider.status()  # warm pools fill once serving starts; local processes keep none
    warm = f", {warm_pool} warm container(s) per env" if warm_pool and sandboxes.isolated else ""
    typer.echo(f"serving on http://{host}:{port} (sandbox: {sandboxes.kind}{warm}, at most {max_concurrent_envs} sessions)")
    uvicorn.Server(uvicorn.Config(create_app(served), log_level="info")).run(sockets=[listener])


@app.command()
def build(bundle: BundleArg) -> None:
    """Build the Docker image of every env of a bundle that lacks one (an unchanged env
    folder is never rebuilt; a changed one always is)."""
    loaded = load_bundle(bundle)
    if loaded.problems:
        typer.echo(str(BundleInvalid(loaded.root, loaded.problems)), err=True)
        raise typer.Exit(1)
    try:
        provider = make_provider("docker")
    except ConfigError as error:
        _fail(str(error))

    async def prepare_all() -> None:
        try:
            for env in loaded.envs.values():
                prepared = await provider.prepare(sandbox_spec(env), typer.echo)
                state = f"built in {prepared.seconds:.0f}s" if prepared.built else "up to date"
                typer.echo(f"{env.name}: {prepared.image} {state}")
        finally:
            await provider.aclose()

    try:
        asyncio.run(prepare_all())
    except ImageError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None


def summary(served: ServedBundle) -> str:
    bundle = served.bundle
    splits = ", ".join(
        f"{name} (0: every task is in an eval split)" if name == TRAIN_SPLIT and not tasks else f"{name} ({len(tasks)})"
        for name, tasks in bundle.splits.items()
    )
    tools = sorted({tool.name for toolset in served.toolsets.values() for tool in toolset.tools})
    return (
        f"{bundle.manifest.name}: {len(bundle.tasks)} tasks; splits {splits}; "
        f"{len(bundle.envs)} env(s) ({', '.join(bundle.envs)}); tools {', '.join(tools)}"
    )


def _open_or_exit(bundle: Path, options: ServeOptions) -> ServedBundle:
    """The bundle, checked and served with `options`; exit 1 listing every problem of a bundle
    with problems, exit 2 (one line) for a setting that cannot work (no Docker engine...)."""
    try:
        return asyncio.run(ServedBundle.open(bundle, options))
    except BundleInvalid as error:
        # Problems the env checks added after loading are merged too: one line per shared problem.
        typer.echo(str(BundleInvalid(bundle, merge_shared(error.problems))), err=True)
        raise typer.Exit(1) from None
    except ConfigError as error:
        _fail(str(error))


def _refuse_bad_call(bundle: Path, sandbox: str) -> None:
    """Exit 2, in one line, for an unknown sandbox or a bundle folder that is not there."""
    if sandbox not in KINDS:
        _fail(f"unknown --sandbox {sandbox!r}; choose one of: {', '.join(KINDS)}")
    if not bundle.is_dir():
        _fail(f"no bundle folder at {bundle}; give the folder that holds bundle.toml, or write one with: corral init NAME")


def _listen(host: str, port: int) -> socket.socket:
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
            _fail(f"port {port} on {host} is in use (another corral serve?); stop what listens there, or serve with --port {port + 1}")
        _fail(f"cannot listen on {host}:{port} ({error.strerror or error}); serve with another --host or --port")
    return listener


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USAGE_ERROR)


def main() -> None:
    app()
