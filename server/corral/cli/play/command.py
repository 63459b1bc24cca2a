"""`corral play`: one task played by hand in the terminal, or a script of calls replayed.
`corral.cli.main` registers it on its app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corral.cli.exits import exits_on_refusal, fail, refuse_bad_target
from corral.cli.options import TargetArg, UnsafeLocalShellOption, UrlTokenOption


def play_command(
    target: TargetArg,
    task: Annotated[str | None, typer.Option(help="The task id to play.")] = None,
    split: Annotated[str | None, typer.Option(help="Play a task of this split (its first, or --index).")] = None,
    index: Annotated[int | None, typer.Option(min=0, help="The task's index in --split (default split: all).")] = None,
    sandbox: Annotated[
        str,
        typer.Option(
            help="A bundle folder's sandbox: auto (docker when an engine answers, else local), docker, local or modal."
        ),
    ] = "auto",
    token: UrlTokenOption = None,
    script: Annotated[
        Path | None,
        typer.Option(
            help='Replay the calls in FILE (one JSON object a line, {"tool": NAME, "arguments": {...}}) instead of reading them from the terminal; exit 1 if the episode ends unscored.'
        ),
    ] = None,
    record: Annotated[
        Path | None, typer.Option(help="Write the calls played to FILE, as a --script replays them.")
    ] = None,
    unsafe_local_shell: UnsafeLocalShellOption = False,
) -> None:
    """Play one task by hand in the terminal (or replay a script of calls): the prompts, the
    tools, each call's answer, and at the end the scores, the reward and any verifier output."""
    try:  # imported here: the play extra is optional for serving
        from rich.console import Console

        from corral.cli.play.keys import read_script
        from corral.cli.play.player import PlayOptions, play
    except ImportError as error:
        fail(f"corral play needs prompt_toolkit and rich: pip install 'corral[play]' ({error})")
    if task is not None and (split is not None or index is not None):
        fail("name the task one way: --task ID, or --split (and --index)")
    refuse_bad_target(target, sandbox)
    try:
        with exits_on_refusal(target):
            calls = read_script(script) if script is not None else None
            options = PlayOptions(
                target=target,
                task_id=task,
                split=split,
                index=index,
                sandbox=sandbox,
                token=token,
                script=calls,
                record=record,
                unsafe_local_shell=unsafe_local_shell,
            )
            status = play(options, Console(highlight=False))
    except KeyboardInterrupt:  # Ctrl-C during a call: the session and server are already closed
        raise typer.Exit(130) from None
    raise typer.Exit(status)
