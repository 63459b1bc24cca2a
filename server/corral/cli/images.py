"""`corral build`: the Docker image of every env of a bundle, built where it lacks one and, with
`--push`, pushed to the registry the kubernetes sandbox pulls from. `corral.cli.main`
registers it on its app."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from corral.cli.exits import fail
from corral.cli.options import BundleArg
from corral.errors import BundleInvalid, ConfigError, ImageError
from corral.sandboxes import make_provider, push_image
from corral.server.bundles.checks import sandbox_spec
from corral.server.formats import load_bundle


def build(
    bundle: BundleArg,
    push: Annotated[
        str | None,
        typer.Option(
            metavar="REGISTRY",
            help="Then push each env's image to REGISTRY (host\\[:port]\\[/path]; `docker login` first) as "
            "REGISTRY/corral-env/ENV:DIGEST, where --sandbox kubernetes with CORRAL_REGISTRY=REGISTRY pulls it.",
        ),
    ] = None,
) -> None:
    """Build the Docker image of every env of a bundle that lacks one (an unchanged env
    folder is never rebuilt; a changed one always is), and with --push, push them."""
    loaded = load_bundle(bundle)
    if loaded.problems:
        typer.echo(str(BundleInvalid(loaded.root, loaded.problems)), err=True)
        raise typer.Exit(1)
    try:
        provider = make_provider("docker")
    except ConfigError as error:
        fail(str(error))
    provider = loaded.serving_provider(provider)

    async def prepare_all() -> None:
        try:
            for env in loaded.envs.values():
                spec = sandbox_spec(env)
                prepared = await provider.prepare(spec, typer.echo)
                state = f"built in {prepared.seconds:.0f}s" if prepared.built else "up to date"
                typer.echo(f"{env.name}: {prepared.image} {state}")
                if push is not None and prepared.image is not None:
                    await push_built(env.name, spec.image, prepared.image, push)
        finally:
            await provider.aclose()

    try:
        asyncio.run(prepare_all())
    except (ImageError, ConfigError) as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None


async def push_built(env_name: str, prebuilt: str | None, image: str, registry: str) -> None:
    """Push an env's built image to `registry`; a prebuilt image is pulled as named, so it stays."""
    if prebuilt is not None:
        typer.echo(f"{env_name}: {prebuilt} is pulled as named (a prebuilt image); not pushed")
        return
    pushed = await asyncio.to_thread(push_image, image, registry, typer.echo)
    typer.echo(f"{env_name}: {pushed} pushed")
