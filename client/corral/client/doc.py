"""A `Doc`: how one of corral's objects reads, as a list of blocks that renders three ways,
as plain text (a terminal, `print`), Markdown and HTML (Jupyter). `Displayed` objects carry
one; what each object's Doc holds is `corral.client.display`'s.

Standard library only: no notebook package is needed to display anything.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Literal

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


_PRE = (
    "white-space: pre-wrap; word-break: break-word; margin: 0.2em 0; padding: 0.3em; background: rgba(127,127,127,0.08)"
)


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
