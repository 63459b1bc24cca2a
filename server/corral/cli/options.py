"""The arguments and options several `corral` commands take alike, and `corral serve`'s flags
made from ServeOptions' fields (`serve_flags`): each setting is declared once, on its field."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.server.serving.options import FLAG, Flag, ServeOptions

BundleArg = Annotated[
    Path,
    typer.Argument(help="The bundle folder (it holds bundle.toml), or a folder of Harbor tasks.", show_default=False),
]

TargetArg = Annotated[
    str,
    typer.Argument(
        metavar="BUNDLE|URL",
        help="A bundle folder (served in this process) or a corral server's URL.",
        show_default=False,
    ),
]
UrlTokenOption = Annotated[str | None, typer.Option(envvar="CORRAL_TOKEN", help="A URL's bearer token.")]

_FIELDS = {field.name: field for field in dataclasses.fields(ServeOptions) if FLAG in field.metadata}
_TYPES = typing.get_type_hints(ServeOptions)


def serve_option(name: str) -> Any:
    """The command-line parameter of ServeOptions' field `name`: its type, flag and help; its
    default is the field's, or None where the field's is worked out when the options are made."""
    field = _FIELDS[name]
    flag: Flag = field.metadata[FLAG]
    option = typer.Option(
        f"--{flag.name or name.replace('_', '-')}",
        help=flag.help.replace("[", "\\["),  # a bracket would be read as rich markup
        envvar=flag.envvar,
        min=flag.min,
        max=flag.max,
    )
    kind = flag.type if flag.type is not None else _TYPES[name]
    if field.default is dataclasses.MISSING:
        kind = kind | None
    return Annotated[kind, option]


def _default(name: str) -> Any:
    default = _FIELDS[name].default
    return None if default is dataclasses.MISSING else default


NetworkOption = serve_option("network")
UnsafeLocalShellOption = serve_option("unsafe_local_shell")


def serve_flags(command: Callable[..., None]) -> Callable[..., None]:
    """`command` taking one flag per ServeOptions field in place of its `options` parameter,
    which it is then given made from them (a flag not given and shown without a default leaves
    the field's own)."""
    signature = inspect.signature(command, eval_str=True)
    own = list(signature.parameters.values())
    at = [parameter.name for parameter in own].index("options")
    flags = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=serve_option(name), default=_default(name))
        for name in _FIELDS
    ]
    after = [parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY) for parameter in own[at + 1 :]]
    parameters = [*own[:at], *flags, *after]

    @functools.wraps(command)
    def with_options(*args: Any, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in _FIELDS}
        worked_out = {name for name in _FIELDS if _FIELDS[name].default is dataclasses.MISSING}
        options = ServeOptions(
            **{name: value for name, value in given.items() if value is not None or name not in worked_out}
        )
        command(*args, options=options, **kwargs)

    with_options.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_options.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return with_options
