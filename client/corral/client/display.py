"""How corral's objects read when shown: an observation, a tool's answer, an episode's
transcript and dataset rows, as HTML and Markdown in Jupyter and as plain text elsewhere.

    show(env.dataset[0])                  # a row: its task, system prompt and prompt
    e.submit_schedule(actions=[0] * 24)   # a tool's answer shows itself (it is still a str)
    e                                     # an environment: its episode's transcript so far
    print(e)                              # the same, as plain text

Each object is described once, as a `Doc` (a list of blocks), which renders three ways.
Standard library only: no notebook package is needed to display anything.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:  # display is imported by the modules that define these
    from corral.client.episode import CallRecord, Episode
    from corral.client.protocol import CallToolObservation, ResetObservation
    from corral.client.records import EpisodeRecord, RolloutRecord

ROWS_SHOWN = 20
SNIPPET_CHARS = 160
BlockKind = Literal["title", "field", "text", "call", "answer", "error", "table"]


@dataclass(frozen=True)
class Block:
    """One piece of a Doc. `kind`: title, field (label: text), text (a long text, e.g. a
    prompt; `folded` ones start collapsed in HTML), call (label: name(args)), answer, error,
    table (`rows` under the `columns` in `text`, tab-separated)."""

    kind: BlockKind
    text: str
    label: str = ""
    folded: bool = False
    rows: tuple[tuple[str, ...], ...] = ()


@dataclass
class Doc:
    blocks: list[Block] = field(default_factory=list)

    def add(self, kind: BlockKind, text: str, **extra: Any) -> Doc:
        self.blocks.append(Block(kind, text, **extra))
        return self

    def text(self) -> str:
        lines: list[str] = []
        for b in self.blocks:
            if b.kind == "title":
                lines.append(f"== {b.text} ==")
            elif b.kind == "field":
                lines.append(f"{b.label}: {b.text}")
            elif b.kind == "text":
                lines += [f"{b.label}:", _indent(b.text)]
            elif b.kind == "call":
                lines.append(f"{b.label} {b.text}")
            elif b.kind in ("answer", "error"):
                lines.append(_indent(("error: " if b.kind == "error" else "") + b.text, "    -> "))
            elif b.kind == "table":
                lines.append("  ".join(b.text.split("\t")))
                lines += ["  ".join(row) for row in b.rows]
        return "\n".join(lines)

    def markdown(self) -> str:
        parts: list[str] = []
        for b in self.blocks:
            if b.kind == "title":
                parts.append(f"#### {_md(b.text)}")
            elif b.kind == "field":
                parts.append(f"**{_md(b.label)}:** {_md(b.text)}")
            elif b.kind == "text":
                parts.append(f"**{_md(b.label)}:**\n\n{_fenced(b.text)}")
            elif b.kind == "call":
                parts.append(f"**{_md(b.label)}** {_code(b.text)}")
            elif b.kind in ("answer", "error"):
                parts.append(("**error:**\n\n" if b.kind == "error" else "") + _fenced(b.text))
            elif b.kind == "table":
                columns = b.text.split("\t")
                table = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                table += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in b.rows]
                parts.append("\n".join(table))
        return "\n\n".join(parts)

    def html(self) -> str:
        out = ['<div class="corral" style="font-family: sans-serif; line-height: 1.4">']
        for b in self.blocks:
            text, label = html.escape(b.text), html.escape(b.label)
            if b.kind == "title":
                out.append(f'<div style="font-weight: bold; font-size: 1.1em; margin: 0.3em 0">{text}</div>')
            elif b.kind == "field":
                out.append(f"<div><b>{label}:</b> {text}</div>")
            elif b.kind == "text":
                body = f'<pre style="{_PRE}">{text}</pre>'
                summary = f"<summary><b>{label}</b></summary>"
                out.append(f"<details{'' if b.folded else ' open'}>{summary}{body}</details>")
            elif b.kind == "call":
                out.append(f'<div style="margin-top: 0.5em"><b>{label}</b> <code>{text}</code></div>')
            elif b.kind == "answer":
                out.append(f'<pre style="{_PRE}; margin-left: 1.5em">{text}</pre>')
            elif b.kind == "error":
                out.append(f'<pre style="{_PRE}; margin-left: 1.5em; color: #b00020">error: {text}</pre>')
            elif b.kind == "table":
                head = "".join(f"<th style='text-align: left'>{html.escape(c)}</th>" for c in b.text.split("\t"))
                body = "".join(
                    "<tr>" + "".join(f"<td style='text-align: left'>{html.escape(c)}</td>" for c in row) + "</tr>"
                    for row in b.rows
                )
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        out.append("</div>")
        return "\n".join(out)


_PRE = "white-space: pre-wrap; word-break: break-word; margin: 0.2em 0; padding: 0.3em; background: rgba(127,127,127,0.08)"


class Displayed:
    """Mixin: Jupyter shows the object as HTML (or Markdown, where HTML is not shown)."""

    def _doc(self) -> Doc:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self._doc().html()

    def _repr_markdown_(self) -> str:
        return self._doc().markdown()


class Shown(Displayed):
    """What `show` returns: HTML or Markdown in Jupyter, plain text in a terminal or print()."""

    def __init__(self, doc: Doc):
        self.doc = doc

    def _doc(self) -> Doc:
        return self.doc

    def __repr__(self) -> str:
        return self.doc.text()

    __str__ = __repr__


class ToolAnswer(Displayed, str):
    """A tool's answer: the text the model reads (TRL takes it as the plain `str` it is), which
    Jupyter shows with its error, or the episode's end, when there is one."""

    observation: CallToolObservation

    def __new__(cls, observation: CallToolObservation) -> Self:
        answer = super().__new__(cls, observation.answer)
        answer.observation = observation
        return answer

    def __reduce__(self) -> Any:  # pickles as the plain text (AsyncGRPO's process needs no more)
        return str, (str(self),)

    def _doc(self) -> Doc:
        return call_doc(self.observation)


def show(thing: Any, limit: int = ROWS_SHOWN) -> Shown:
    """`thing` as readable HTML/Markdown in Jupyter and plain text elsewhere: an environment, an
    episode, an observation, a tool's answer, a dataset row (`env.dataset[0]`), or a dataset
    or list of rows (the first `limit` of them as a table)."""
    if isinstance(thing, Displayed):
        return Shown(thing._doc())
    if isinstance(thing, dict) and "prompt" in thing:
        return Shown(row_doc(thing))
    if hasattr(thing, "column_names") or isinstance(thing, list):  # a datasets.Dataset, or rows
        return Shown(rows_doc(thing, limit))
    raise TypeError(
        f"show() displays corral's environments, episodes, observations, tool answers and dataset "
        f"rows; it got a {type(thing).__name__}"
    )


# What each object shows ------------------------------------------------------------------------


def reset_doc(opened: ResetObservation) -> Doc:
    doc = Doc().add("title", f"task {opened.task_id} · episode {opened.episode_id}")
    _prompts(doc, opened.system_prompt, opened.prompt, opened.turn)
    doc.add("text", "\n".join(tool_line(t.name, t.input_schema, t.description) for t in opened.offered_tools),
            label="tools")
    if opened.done:
        _ending(doc, opened, opened.reward, opened.reason)
    return doc


def call_doc(observed: CallToolObservation) -> Doc:
    doc = Doc().add("title", observed.tool_name)
    _answer(doc, observed)
    if observed.done:
        _ending(doc, observed, observed.reward, observed.reason)
    return doc


def episode_doc(episode: Episode) -> Doc:
    """The transcript: prompts, every call with its arguments and answer, and how it ended."""
    opened = episode.opened
    if opened is None:
        return Doc().add("title", "no episode yet: call reset(**row) to start one")
    doc = Doc().add("title", f"task {opened.task_id} · episode {opened.episode_id}")
    doc.add("field", f"{', '.join(t.name for t in opened.offered_tools)}", label="tools")
    _prompts(doc, opened.system_prompt, opened.prompt, opened.turn)
    for number, record in enumerate(episode.calls, 1):
        doc.blocks += turn_doc(number, record).blocks
    if episode.open:
        return doc.add("field", f"open ({len(episode.calls)} calls)", label="episode")
    doc.blocks += ending_doc(episode).blocks
    return doc


def turn_doc(number: int, record: CallRecord) -> Doc:
    """One call of an episode, numbered, and its answer (for end_turn, the next prompt)."""
    doc = Doc().add("call", call_line(record.tool, record.arguments), label=f"[{number}]")
    _answer(doc, record.observation)
    return doc


def ending_doc(episode: Episode) -> Doc:
    """How an ended episode came out: its scores, its reward (the client's reward rule may pick
    another score than the server's), a command verifier's output."""
    doc = Doc()
    if episode.final is not None:
        _ending(doc, episode.final, episode.reward, episode.reason)
    return doc


def record_doc(record: EpisodeRecord, rollout: RolloutRecord | None = None) -> Doc:
    """A recorded episode as a transcript: the prompts and tools, every call with its answer and
    timing, how it ended; with the trainer's record, what the model saw and sampled, in ids."""
    doc = Doc().add("title", f"task {record.task_id} · episode {record.episode_id}")
    doc.add("field", f"{record.run} · split {record.split or '-'} · sandbox {record.sandbox or '-'} · "
                     f"{len(record.calls)} calls in {record.turns} turn(s)", label="run")
    _prompts(doc, record.system_prompt, record.prompt, 1)
    doc.add("text", "\n".join(tool_line(t.name, t.input_schema, t.description) for t in record.tools), label="tools",
            folded=True)
    for number, call in enumerate(record.calls, 1):
        doc.add("call", f"{call_line(call.tool, call.arguments)}   (turn {call.turn}, at {call.started_s:.3f}s, "
                        f"took {call.seconds:.3f}s)", label=f"[{number}]")
        if call.error is not None:
            doc.add("error", f"{call.error.error_type}: {call.error.message}")
        elif call.prompt is not None:
            doc.add("text", call.prompt, label="prompt (next turn)")
        else:
            doc.add("answer", call.result or "")
    doc.add("field", f"{record.status} ({record.cause})" + (f": {record.reason}" if record.reason else ""), label="ended")
    if record.scores:
        doc.add("field", ", ".join(f"{k}={v:g}" for k, v in record.scores.items()), label="scores")
    doc.add("field", "none (left out of training)" if record.reward is None else f"{record.reward:g}", label="reward")
    doc.add("field", ", ".join(f"{phase} {s:.3f}s" for phase, s in record.seconds.items()), label="seconds")
    if rollout is not None:
        known = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=False) if m and not math.isnan(lp)]
        logprobs = f"mean logprob {sum(known) / len(known):.3f}" if known else "logprobs not computed"
        doc.add("field", f"{len(rollout.prompt_ids)} prompt ids, {len(rollout.completion_ids)} completion ids of "
                         f"which {rollout.sampled} sampled; {logprobs}; truncated: {rollout.truncated or 'no'}",
                label="tokens")
    return doc


def row_doc(row: dict[str, Any]) -> Doc:
    where = ", ".join(f"{key} {row[key]}" for key in ("split", "index", "environment") if key in row)
    doc = Doc().add("title", f"task {row.get('task_id', '?')}" + (f" ({where})" if where else ""))
    for message in row["prompt"]:
        role = message.get("role", "?")
        doc.add("text", str(message.get("content", "")), label=role, folded=role == "system")
    return doc


def rows_doc(rows: Any, limit: int) -> Doc:
    shown = [rows[i] for i in range(min(limit, len(rows)))]
    doc = Doc().add("title", f"{len(rows)} rows" + (f" (the first {len(shown)})" if len(shown) < len(rows) else ""))
    table = tuple((str(r.get("index", "")), str(r.get("task_id", "")), str(r.get("split", "")),
                   _snippet(_user_prompt(r))) for r in shown)
    return doc.add("table", "index\ttask_id\tsplit\tprompt", rows=table)


# Pieces ----------------------------------------------------------------------------------------


def call_line(tool: str, arguments: dict[str, Any]) -> str:
    """A call as Python would write it: `place(row=2, col=2)`."""
    return f"{tool}({', '.join(f'{k}={json.dumps(v)}' for k, v in arguments.items())})"


def tool_line(name: str, schema: dict[str, Any], description: str = "") -> str:
    """A tool as its parameters: `place(row: integer, col: integer) - Place your X; ...`."""
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    params = ", ".join(
        f"{p}: {_type_name(spec)}" + ("" if p in required else " = optional") for p, spec in properties.items()
    )
    first_line = description.strip().splitlines()[0] if description.strip() else ""
    return f"{name}({params})" + (f" - {first_line}" if first_line else "")


def _type_name(spec: dict[str, Any]) -> str:
    kind = spec.get("type", "any")
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array of {_type_name(spec['items'])}"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _prompts(doc: Doc, system_prompt: str, prompt: str, turn: int) -> None:
    if system_prompt:
        doc.add("text", system_prompt, label="system prompt", folded=True)
    doc.add("text", prompt, label=f"prompt (turn {turn})")


def _answer(doc: Doc, observed: CallToolObservation) -> None:
    if observed.error is not None:
        doc.add("error", f"{observed.error.error_type}: {observed.error.message}")
    elif observed.prompt is not None:  # end_turn opened the next turn
        doc.add("text", observed.prompt, label=f"prompt (turn {observed.turn})")
    else:
        doc.add("answer", observed.answer)


def _ending(doc: Doc, final: ResetObservation | CallToolObservation, reward: float | None,
            reason: str | None) -> None:
    if final.scores:
        doc.add("field", ", ".join(f"{k}={v:g}" for k, v in final.scores.items()), label="scores")
    if reward is not None:
        doc.add("field", f"{reward:g}", label="reward")
    else:
        doc.add("field", f"none: {reason or 'the episode ended without a reward'}", label="reward")
    for score_id, output in (final.metadata.get("verifier_output") or {}).items():
        doc.add("text", str(output), label=f"verifier output ({score_id})", folded=True)


def _user_prompt(row: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in row.get("prompt", []) if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 3] + "..."


def _indent(text: str, first: str = "    ") -> str:
    pad = " " * len(first)
    lines = text.splitlines() or [""]
    return "\n".join([first + lines[0], *(pad + line for line in lines[1:])])


def _fenced(text: str) -> str:
    """A Markdown code block that no run of backticks in `text` can close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _code(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}"


def _md(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def _cell(text: str) -> str:
    return html.escape(text).replace("|", "\\|").replace("\n", " ")
