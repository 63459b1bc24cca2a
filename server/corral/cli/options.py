"""The arguments and options several `corral` commands take alike."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

BundleArg = Annotated[
    Path,
    typer.Argument(help="The bundle folder (it holds bundle.toml), or a folder of Harbor tasks.", show_default=False),
]
UnsafeLocalShellOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-local-shell",
        help="--sandbox local where bubblewrap cannot run: serve envs whose tools give the agent a shell or files anyway, though their processes then share this machine's files, processes and network (corral's own API included). Never on a machine with anything to protect.",
    ),
]
