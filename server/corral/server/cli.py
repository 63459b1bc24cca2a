"""The `corral` command: check a bundle, serve it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from corral.server.app import create_app
from corral.server.served import BundleProblems, ServedBundle, ServeOptions

app = typer.Typer(
    help="corral: serve bundles of agent tasks as live environments for RL trainers.",
    no_args_is_help=True,
    add_completion=False,
)

BundleArg = Annotated[Path, typer.Argument(help="The bundle folder (it holds bundle.toml).", show_default=False)]


@app.command()
def check(
    bundle: BundleArg,
    sandbox: Annotated[str, typer.Option(help="Where to start each env once to list its tools: auto or local.")] = "local",
) -> None:
    """List every problem of a bundle at once, each with its file and fix; exit 1 if any."""
    served = _open_or_exit(bundle, ServeOptions(sandbox=sandbox))
    asyncio.run(served.aclose())
    typer.echo(summary(served))


@app.command()
def serve(
    bundle: BundleArg,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 to serve trainers on other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    sandbox: Annotated[str, typer.Option(help="Where episodes run: auto (the best this machine has) or local (a child process each; no isolation).")] = "auto",
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
    )
    served = _open_or_exit(bundle, options)
    typer.echo(summary(served))
    typer.echo(f"serving on http://{host}:{port} (sandbox: {served.provider.name}, at most {max_concurrent_envs} sessions)")
    uvicorn.run(create_app(served), host=host, port=port, log_level="info")


def summary(served: ServedBundle) -> str:
    bundle = served.bundle
    splits = ", ".join(f"{name} ({len(tasks)})" for name, tasks in bundle.splits.items())
    tools = sorted({tool.name for toolset in served.toolsets.values() for tool in toolset.tools})
    return (
        f"{bundle.manifest.name}: {len(bundle.tasks)} tasks; splits {splits}; "
        f"{len(bundle.envs)} env(s) ({', '.join(bundle.envs)}); tools {', '.join(tools)}"
    )


def _open_or_exit(bundle: Path, options: ServeOptions) -> ServedBundle:
    try:
        return asyncio.run(ServedBundle.open(bundle, options))
    except BundleProblems as problems:
        typer.echo(str(problems), err=True)
        raise typer.Exit(1) from None


def main() -> None:
    app()
