"""`corral play`: one task of a bundle played by hand in a terminal, or replayed from a script.

For a person debugging a task or a verifier: the prompts and tools as the agent gets them, each
call's answer (the env's own refusal when it refuses), and at the end the scores, the reward
and a command verifier's output. The session is a client like any trainer's: a local bundle
folder is served in-process (`Bundle.local`), a URL is played over the network, and the
episode is driven through `corral.client.Episode`, so what plays here plays in training.

The transcript is printed the same way whether the calls are typed or read from `--script`
(see `corral.cli.play.keys` for both formats), so a session played by hand and recorded
with `--record` replays in CI with the same output.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from prompt_toolkit import PromptSession
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.history import InMemoryHistory
from rich.console import Console
from rich.table import Table
from rich.text import Text

from corral.cli.play.keys import (
    COMMANDS,
    BadInput,
    CallCompleter,
    Command,
    ToolCall,
    parse_line,
)
from corral.client import Bundle, Episode, Session
from corral.client.display import ending_doc, reset_doc, tool_line, turn_doc
from corral.client.doc import Doc
from corral.protocol.frames import ResetData, StateReply, StateRequest

STATE_TIMEOUT_S = 30.0
INDENT = "    "
SCORED, UNSCORED = 0, 1  # exit statuses of a script: a CI job fails on an episode left unscored


@dataclass(frozen=True)
class PlayOptions:
    """What `corral play` was asked for: where the bundle is, which task, and how to play it."""

    target: str  # a bundle folder (served in-process) or a server's URL
    task_id: str | None = None
    split: str | None = None
    index: int | None = None
    sandbox: str = "auto"
    token: str | None = None
    script: list[ToolCall] | None = None  # None: play interactively
    record: Path | None = None
    unsafe_local_shell: bool = False  # Bundle.local's: see `corral serve --unsafe-local-shell`

    @property
    def remote(self) -> bool:
        return self.target.startswith(("http://", "https://"))


def play(options: PlayOptions, console: Console) -> int:
    """Play the task `options` names; the exit status (a script's says whether it was scored).
    Raises CorralError for a bundle or server that cannot be played."""
    if options.remote:
        bundle = Bundle(options.target, split="all", token=options.token)
    else:
        bundle = Bundle.local(
            options.target, split="all", sandbox=options.sandbox, unsafe_local_shell=options.unsafe_local_shell
        )
    player = Player(bundle, options, console)
    try:
        player.start()
        if options.script is not None:
            return player.run_script(options.script)
        player.run_interactive()
        return 0
    finally:
        player.close()
        bundle.close()


class Player:
    """Plays one task for the person at the terminal, on one session: the episode under way,
    its transcript printed as it goes."""

    def __init__(self, bundle: Bundle, options: PlayOptions, console: Console):
        self.bundle, self.options, self.console = bundle, options, console
        self.session = Session(bundle.url, token=options.token if options.remote else None)
        self.reset_data = ResetData(task_id=options.task_id, split=options.split, index=options.index)
        self.episode = Episode(self.session, bundle.limits)
        self._record: IO[str] | None = None

    def start(self) -> None:
        """Start the task in a new episode (the one before, if any, is abandoned)."""
        self.episode = Episode(self.session, self.bundle.limits)
        opened = self.episode.start(self.reset_data)
        if self.options.record is not None:  # the record holds the calls of the latest episode
            if self._record is not None:
                self._record.close()
            self._record = self.options.record.open("w")
        print_doc(self.console, reset_doc(opened))
        if not self.episode.open:
            self._ended()

    def call(self, call: ToolCall) -> None:
        was_open = self.episode.open
        self.episode.call(call.tool, call.arguments)
        if self._record is not None:
            self._record.write(call.as_script_line() + "\n")
            self._record.flush()
        print_doc(self.console, turn_doc(len(self.episode.calls), self.episode.calls[-1]))
        if was_open and not self.episode.open:
            self._ended()

    def run_script(self, calls: list[ToolCall]) -> int:
        for call in calls:
            self.call(call)
        if self.episode.open:  # what get_reward does for a trainer: the verifiers score what was done
            self.console.print(
                Text("the script ended with the episode open: ending its turns with empty replies", style="dim")
            )
            before = len(self.episode.calls)
            self.episode.finish()
            for number, record in enumerate(self.episode.calls[before:], before + 1):
                print_doc(self.console, turn_doc(number, record))
            self._ended()
        return SCORED if self.episode.reward is not None else UNSCORED

    def run_interactive(self) -> None:
        read = _line_reader(self)
        self.console.print(
            Text(f"type a call as  name key=value ...  or as JSON; Tab completes; {' '.join(COMMANDS)}", style="dim")
        )
        while True:
            try:
                line = read(f"{self.bundle.name}> ")
            except EOFError:
                return
            except KeyboardInterrupt:  # Ctrl-C drops the line being typed, as a shell does
                continue
            try:
                parsed = parse_line(line, self.episode.tools)
            except BadInput as error:
                self.console.print(Text(str(error), style="red"))
                continue
            if isinstance(parsed, ToolCall):
                self.call(parsed)
            elif isinstance(parsed, Command) and not self.command(parsed):
                return

    def command(self, command: Command) -> bool:
        """Carry out a `:` command; False to leave."""
        if command.name == ":quit":
            return False
        if command.name == ":end":
            self.call(ToolCall("end_turn", {"response": command.rest}))
        elif command.name == ":reset":
            self.start()
        elif command.name == ":tools":
            tools = "\n".join(tool_line(t.name, t.input_schema, t.description) for t in self.episode.tools)
            print_doc(self.console, Doc().add("text", tools, label="tools"))
        elif command.name == ":state":
            self._state()
        else:
            print_doc(
                self.console, Doc().add("text", "\n".join(f"{k:8} {v}" for k, v in COMMANDS.items()), label="commands")
            )
        return True

    def close(self) -> None:
        if self._record is not None:
            self._record.close()
        self.session.close()

    def _state(self) -> None:
        reply = self.session.request(StateRequest(), STATE_TIMEOUT_S)
        if isinstance(reply, StateReply):
            fields = reply.data.model_dump(exclude_none=True)
            print_doc(self.console, Doc().add("text", "\n".join(f"{k}: {v}" for k, v in fields.items()), label="state"))

    def _ended(self) -> None:
        print_doc(self.console, ending_doc(self.episode))
        if self.options.script is None:
            self.console.print(Text("the episode has ended: :reset plays the task again, :quit leaves", style="dim"))


def print_doc(console: Console, doc: Doc) -> None:
    """A display Doc in the terminal, styled by rich (plain where the output is not a terminal)."""
    for block in doc.blocks:
        if block.kind == "title":
            console.print(Text(block.text, style="bold underline"), soft_wrap=True)
        elif block.kind == "field":
            console.print(Text.assemble((f"{block.label}: ", "bold"), block.text), soft_wrap=True)
        elif block.kind == "text":
            console.print(Text(f"{block.label}:", style="bold"))
            console.print(Text(_indented(block.text, console.width)), soft_wrap=True)
        elif block.kind == "call":
            console.print(Text.assemble((f"{block.label} ", "bold"), (block.text, "cyan")), soft_wrap=True)
        elif block.kind == "answer":
            console.print(Text(_indented(block.text, console.width), style="green"), soft_wrap=True)
        elif block.kind == "error":
            console.print(Text(_indented(f"error: {block.text}", console.width), style="red"), soft_wrap=True)
        elif block.kind == "table":
            table = Table(*block.text.split("\t"))
            for row in block.rows:
                table.add_row(*row)
            console.print(table)


def _indented(text: str, width: int) -> str:
    """`text` indented by four, wrapped to `width` here (rich's own wrapping would pad each line
    with spaces, and drop the indent of the lines it wraps)."""
    lines = []
    for line in text.splitlines() or [""]:
        lines += textwrap.wrap(
            line,
            max(width, 20),
            initial_indent=INDENT,
            subsequent_indent=INDENT,
            replace_whitespace=False,
            break_on_hyphens=False,
        ) or [""]
    return "\n".join(lines)


def _line_reader(player: Player) -> Callable[[str], str]:
    """prompt_toolkit's prompt (completion, history) on a terminal; plain lines from a pipe."""
    if not sys.stdin.isatty():  # piped calls: read them as typed, with no prompt in the output
        return lambda _prompt: input()
    session: PromptSession[str] = PromptSession(
        history=InMemoryHistory(),
        auto_suggest=AutoSuggestFromHistory(),
        completer=CallCompleter(player.episode.tools),
        complete_while_typing=False,
    )
    return session.prompt
