"""`corral serve`'s flags are ServeOptions' fields: each field declared once (name, type, default,
help) is a flag of the command with that help, and the flags given reach the options served."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from corral.cli import main
from corral.server.serving.options import FLAG, ServeOptions
from corral.server.serving.served import default_instance

# The command's own flags: where to listen, the worker processes, the token's file.
OWN = {"--host": "127.0.0.1", "--port": 8000, "--workers": 1, "--token-file": None}
# Every flag `corral serve` had before its flags were made from ServeOptions, with its default:
# a flag renamed or a default changed breaks a user's command line.
BEFORE = {
    **OWN,
    "--sandbox": "auto",
    "--warm-pool": 0,
    "--instance": None,
    "--max-concurrent-envs": 8,
    "--reward": None,
    "--tool-timeout": None,
    "--reset-timeout": None,
    "--token": None,
    "--max-frame-mb": 4.0,
    "--verifier-workers": 2,
    "--concurrent-starts": None,  # twice the CPUs, at least 4: worked out when not given
    "--network": None,
    "--record": None,
    "--unsafe-local-shell": False,
}
NOT_FLAGS = {"max_argument_bytes", "max_output_chars"}  # bounds the server keeps (options.py says why)


def serve_command() -> typer.main.click.Command:
    return typer.main.get_command(main.app).commands["serve"]  # type: ignore[attr-defined]


def test_each_flagged_field_is_an_option_with_its_help_default_and_envvar():
    options = {param.opts[0]: param for param in serve_command().params if param.opts[0].startswith("--")}
    fields = [field for field in dataclasses.fields(ServeOptions) if FLAG in field.metadata]
    for field in fields:
        flag = field.metadata[FLAG]
        option = options[f"--{flag.name or field.name.replace('_', '-')}"]
        default = None if field.default is dataclasses.MISSING else field.default
        assert (option.default, option.help.replace("\\[", "["), option.envvar) == (default, flag.help, flag.envvar)
    assert len(options) == len(fields) + len(OWN)
    assert {field.name for field in dataclasses.fields(ServeOptions)} - {field.name for field in fields} == NOT_FLAGS, (
        "declare a new ServeOptions field with field(default=..., metadata=flag(HELP)) so `corral serve` takes it"
    )


def test_the_flags_corral_serve_had_keep_their_names_and_defaults():
    defaults = {param.opts[0]: param.default for param in serve_command().params}
    assert {name: defaults.get(name, "missing") for name in BEFORE} == BEFORE


def test_the_help_page_shows_each_fields_help():
    page = " ".join(
        CliRunner().invoke(main.app, ["serve", "--help"], terminal_width=1000, env={"COLUMNS": "1000"}).output.split()
    )
    for field in dataclasses.fields(ServeOptions):
        if FLAG in field.metadata:
            assert " ".join(field.metadata[FLAG].help.split()) in page


@pytest.fixture
def served_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Run `corral serve ARGS` up to opening the bundle; the options it would serve with."""
    given: list[ServeOptions] = []

    class Opened(Exception):
        pass

    def open_or_exit(bundle: Path, options: ServeOptions) -> None:
        given.append(options)
        raise Opened

    monkeypatch.setattr(main, "listen", lambda host, port: socket.socket())  # closed when the open fails
    monkeypatch.setattr(main, "open_or_exit", open_or_exit)

    def serve(*args: str, env: dict[str, str] | None = None) -> ServeOptions:
        result = CliRunner().invoke(main.app, ["serve", str(tmp_path), *args], env=env)
        assert isinstance(result.exception, Opened), result.output
        return given.pop()

    return serve


def test_the_flags_given_are_the_options_served(served_with):
    options = served_with(
        "--port",
        "9001",
        "--tool-timeout",
        "7",
        "--max-frame-mb",
        "0.5",
        "--record",
        "records",
        "--concurrent-starts",
        "3",
        "--unsafe-local-shell",
        "--sandbox",
        "local",
        env={"CORRAL_WARM_POOL": "2"},
    )
    assert options == ServeOptions(
        sandbox="local",
        warm_pool=2,
        instance=default_instance(9001),
        tool_timeout_s=7.0,
        max_frame_mb=0.5,
        concurrent_starts=3,
        record_dir=Path("records"),
        unsafe_local_shell=True,
    )
    assert options.max_frame_bytes == 512 * 1024


def test_flags_not_given_leave_each_fields_default(served_with):
    assert served_with() == ServeOptions(instance=default_instance(8000))
