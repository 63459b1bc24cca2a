"""The `corral` command: start a bundle, check it, serve it; build its images (`cli.images`), play
a task (`cli.play.command`); evaluate a model and read what was played (`cli.runs`). How it stops when it cannot do what it
was asked (exit status 2 for a mistake in the call, 1 for a bundle with problems) is `cli.exits`'.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from corral.cli.exits import fail, listen, open_or_exit, refuse_bad_call
from corral.cli.images import build
from corral.cli.options import BundleArg, NetworkOption, UnsafeLocalShellOption, serve_flags
from corral.cli.oracle import play_and_close
from corral.cli.play.command import play_command
from corral.cli.rescore import rescore
from corral.cli.runs import episodes, eval_command, view
from corral.cli.scaffold import starter_files, write_starter
from corral.cli.token import serve_token
from corral.errors import ConfigError
from corral.server.bundles.model import TRAIN_SPLIT
from corral.server.serving.app import create_app, socket_settings
from corral.server.serving.options import ServeOptions
from corral.server.serving.served import ServedBundle, default_instance
from corral.server.serving.supervisor import Supervisor, reap_dropped_workers

app = typer.Typer(
    help="corral: serve bundles of agent tasks as live environments for RL trainers.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(show: bool) -> None:
    if show:
        typer.echo(f"corral {importlib.metadata.version('corral')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print corral's version and exit.")
    ] = False,
) -> None:
    pass


@app.command()
def init(
    name: Annotated[str, typer.Argument(help="The bundle's name, and its folder's.", show_default=False)],
    path: Annotated[Path, typer.Option(help="The folder to write the bundle's folder in.")] = Path("."),
    harness: Annotated[
        bool, typer.Option("--harness", help="An agent program that runs its own loop in the sandbox, instead.")
    ] = False,
) -> None:
    """Write a bundle to start from: an env with two tools, three tasks, an eval split, a verifier."""
    kind = "harness" if harness else "tools"
    try:
        root = write_starter(name, path, kind)
    except ConfigError as error:
        fail(str(error))
    shown = os.path.relpath(root)
    typer.echo(f"wrote the bundle {name}:")
    for file in starter_files(kind):
        typer.echo(f"  {os.path.join(shown, file)}")
    typer.echo("next:")
    typer.echo(f"  corral check {shown}    # every problem at once, each with its fix")
    typer.echo(f"  corral serve {shown}    # then play it from Python: see {os.path.join(shown, 'README.md')}")


@app.command()
def check(
    bundle: BundleArg,
    sandbox: Annotated[
        str,
        typer.Option(
            help="Where to start each env once to list its tools: auto (docker when an engine answers, else local, as serve picks), docker, local or modal."
        ),
    ] = "auto",
    network: NetworkOption = None,
    oracle: Annotated[
        bool,
        typer.Option(
            "--oracle",
            help="Harbor tasks: play each task's solution through the agent's tools and its tests; flag each that does not score 1.",
        ),
    ] = False,
    null: Annotated[
        bool,
        typer.Option("--null", help="Harbor tasks: end each task's turn at once; flag each that does not score 0."),
    ] = False,
    unsafe_local_shell: UnsafeLocalShellOption = False,
) -> None:
    """List every problem of a bundle at once, each with its file and fix; exit 1 if any
    (or, with --oracle or --null, if any task is flagged)."""
    refuse_bad_call(bundle, sandbox, network)
    served = open_or_exit(bundle, ServeOptions(sandbox=sandbox, network=network, unsafe_local_shell=unsafe_local_shell))
    try:
        findings, clean = asyncio.run(play_and_close(served, oracle=oracle, null=null))
    except ConfigError as error:  # --oracle or --null for a bundle that is not Harbor tasks
        fail(str(error))
    typer.echo(summary(served))
    if findings:
        typer.echo(findings)
    if not clean:
        raise typer.Exit(1)


@app.command()
@serve_flags
def serve(
    ctx: typer.Context,
    bundle: BundleArg,
    host: Annotated[
        str, typer.Option(help="Address to listen on; 0.0.0.0 to serve trainers on other machines.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    *,
    options: ServeOptions,  # made from a flag per field (serve_flags)
    workers: Annotated[
        int,
        typer.Option(
            envvar="CORRAL_WORKERS",
            min=1,
            help="Server processes sharing the port, each with its own sandboxes and sessions (so one host uses "
            "several cores); --max-concurrent-envs is the host's. A request for a session another worker holds "
            "is passed to it.",
        ),
    ] = 1,
    token_file: Annotated[
        Path | None,
        typer.Option(help="Read the token from FILE (its first line), so it is on no command line.", dir_okay=False),
    ] = None,
) -> None:
    """Serve every task of a bundle over OpenEnv's WebSocket protocol and Task API."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:  # by its name: typer carries a copy of click whose ParameterSource is not click's own
        token = serve_token(
            options.token,
            token_file,
            on_command_line=getattr(ctx.get_parameter_source("token"), "name", "") == "COMMANDLINE",
        )
    except ConfigError as error:
        fail(str(error))
    options = dataclasses.replace(options, token=token, instance=options.instance or default_instance(port))
    refuse_bad_call(bundle, options.sandbox, options.network)
    listener = listen(host, port)  # before the bundle is opened: a port in use is known at once
    try:
        served = open_or_exit(bundle, options)
    except BaseException:
        listener.close()
        raise
    try:
        reap_dropped_workers(options, workers)  # holding the instance now: no other host of it runs
    except ConfigError as error:  # the workers' folder is not one of this user's alone
        asyncio.run(served.aclose())
        fail(str(error))
    typer.echo(summary(served))
    typer.echo(serving_line(served, host, port, workers))
    if workers > 1:  # this process holds the instance and watches the workers; they serve
        try:
            status = Supervisor(bundle, options, listener, workers).run()
        except ConfigError as error:  # the workers' folder is not one of this user's alone
            fail(str(error))
        finally:
            asyncio.run(served.aclose())
        raise typer.Exit(status)
    uvicorn.Server(uvicorn.Config(create_app(served), log_level="info", **socket_settings(served))).run(
        sockets=[listener]
    )


app.command()(build)
app.command(name="play")(play_command)
app.command()(episodes)
app.command()(view)
app.command(name="eval")(eval_command)
app.command()(rescore)


def serving_line(served: ServedBundle, host: str, port: int, workers: int) -> str:
    """The line `corral serve` prints once the bundle is open: where, in what, how many at once."""
    options = served.options
    sandboxes = served.provider.status()  # warm pools fill once serving starts; local processes keep none
    warm = f", {options.warm_pool} warm sandbox(es) per env" if options.warm_pool else ""
    recording = f"; recording episodes in {served.recorder.root}" if served.recorder is not None else ""
    processes = f", {workers} workers" if workers > 1 else ""
    return (
        f"serving on http://{host}:{port} (sandbox: {sandboxes.kind}{warm}, at most {options.max_concurrent_envs} "
        f"sessions{processes}{recording})"
    )


def summary(served: ServedBundle) -> str:
    """The bundle served, in one line (or its format's lines): tasks, splits, envs and tools."""
    bundle = served.bundle
    splits = ", ".join(
        f"{name} (0: every task is in an eval split)" if name == TRAIN_SPLIT and not tasks else f"{name} ({len(tasks)})"
        for name, tasks in bundle.splits.items()
    )
    tools = ", ".join(sorted({tool.name for toolset in served.toolsets.values() for tool in toolset.tools}))
    if bundle.extension is not None:  # its format says what its bundles are
        return "\n".join(bundle.extension.summary(bundle, splits, tools))
    return (
        f"{bundle.manifest.name}: {len(bundle.tasks)} tasks; splits {splits}; "
        f"{len(bundle.envs)} env(s) ({', '.join(bundle.envs)}); tools {tools}"
    )


def main() -> None:
    app()
