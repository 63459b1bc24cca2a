"""The `corral` command: check a bundle, build its images, serve it."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from corral.server.app import create_app
from corral.server.bundle import load_bundle
from corral.server.served import (
    BundleProblems,
    ServedBundle,
    ServeOptions,
    default_instance,
    docker_envs,
)

app = typer.Typer(
    help="corral: serve bundles of agent tasks as live environments for RL trainers.",
    no_args_is_help=True,
    add_completion=False,
)

BundleArg = Annotated[Path, typer.Argument(help="The bundle folder (it holds bundle.toml).", show_default=False)]


@app.command()
def check(
    bundle: BundleArg,
    sandbox: Annotated[str, typer.Option(help="Where to start each env once to list its tools: auto, docker or local.")] = "local",
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
    served = _open_or_exit(bundle, options)
    typer.echo(summary(served))
    warm = f", {warm_pool} warm container(s) per env" if served.provider.name == "docker" and warm_pool else ""
    typer.echo(f"serving on http://{host}:{port} (sandbox: {served.provider.name}{warm}, at most {max_concurrent_envs} sessions)")
    uvicorn.run(create_app(served), host=host, port=port, log_level="info")


@app.command()
def build(bundle: BundleArg) -> None:
    """Build the Docker image of every env of a bundle that lacks one (an unchanged env
    folder is never rebuilt; a changed one always is)."""
    loaded = load_bundle(bundle)
    if loaded.problems:
        typer.echo(str(BundleProblems(loaded.root, loaded.problems)), err=True)
        raise typer.Exit(1)
    try:
        from corral.sandboxes.docker_images import ImageError, ensure_image  # docker is optional
        from corral.sandboxes.docker_provider import engine
    except ImportError as error:
        typer.echo(f"corral build needs the docker package: pip install 'corral[docker]' ({error})", err=True)
        raise typer.Exit(1) from None
    client = engine()
    try:
        for env in docker_envs(loaded):
            started = time.monotonic()
            result = ensure_image(client, env.image, typer.echo)
            state = f"built in {time.monotonic() - started:.0f}s" if result.built else "up to date"
            typer.echo(f"{result.env_name}: {result.tag} {state}")
    except ImageError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()


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
