"""How corral's objects read when shown: an observation, a tool's answer, an episode's
transcript and dataset rows, as HTML and Markdown in Jupyter and as plain text elsewhere.

    show(env.dataset[0])                  # a row: its task, system prompt and prompt
    e.submit_schedule(actions=[0] * 24)   # a tool's answer shows itself (it is still a str)
    e                                     # an environment: its episode's transcript so far
    print(e)                              # the same, as plain text

Each object is described once, as a `Doc` (corral.client.doc), which renders three ways. The
wire frames (corral.protocol.frames) carry no presentation: this module adapts them from
outside, registering their Docs with IPython's formatters when corral.client is imported in a
kernel. Standard library only: no notebook package is needed to display anything.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

from corral.client.doc import Displayed, Doc, Shown
from corral.protocol.frames import CallToolObservation, ResetObservation

if TYPE_CHECKING:
    from corral.protocol.records import EpisodeRecord, RolloutRecord

ROWS_SHOWN = 20
SNIPPET_CHARS = 160


class Call(Protocol):
    """One call of a transcript (`corral.client.episode.CallRecord`); read only."""

    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def observation(self) -> CallToolObservation: ...


class Transcript(Protocol):
    """What an episode's transcript is read from (`corral.client.episode.Episode`, which
    imports this module to show itself); read only."""

    @property
    def opened(self) -> ResetObservation | None: ...
    @property
    def open(self) -> bool: ...
    @property
    def calls(self) -> Sequence[Call]: ...
    @property
    def final(self) -> ResetObservation | CallToolObservation | None: ...
    @property
    def reward(self) -> float | None: ...
    @property
    def reason(self) -> str | None: ...


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
    if isinstance(thing, ResetObservation | CallToolObservation):
        return Shown(frame_doc(thing))
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
    """A reset's observation, readable: the task, its prompts and tools, and its end if it ended."""
    doc = Doc().add("title", f"task {opened.task_id} · episode {opened.episode_id}")
    _prompts(doc, opened.system_prompt, opened.prompt, opened.turn)
    doc.add(
        "text", "\n".join(tool_line(t.name, t.input_schema, t.description) for t in opened.offered_tools), label="tools"
    )
    if opened.done:
        _ending(doc, opened, opened.reward, opened.reason)
    return doc


def frame_doc(frame: ResetObservation | CallToolObservation) -> Doc:
    """A reset's or a tool call's observation, readable."""
    return reset_doc(frame) if isinstance(frame, ResetObservation) else call_doc(frame)


def call_doc(observed: CallToolObservation) -> Doc:
    """A tool call's observation, readable: its answer, and the episode's end if it ended."""
    doc = Doc().add("title", observed.tool_name)
    _answer(doc, observed)
    if observed.done:
        _ending(doc, observed, observed.reward, observed.reason)
    return doc


def episode_doc(episode: Transcript) -> Doc:
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


def turn_doc(number: int, record: Call) -> Doc:
    """One call of an episode, numbered, and its answer (for end_turn, the next prompt)."""
    doc = Doc().add("call", call_line(record.tool, record.arguments), label=f"[{number}]")
    _answer(doc, record.observation)
    return doc


def ending_doc(episode: Transcript) -> Doc:
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
    doc.add(
        "field",
        f"{record.run} · split {record.split or '-'} · sandbox {record.sandbox or '-'} · "
        f"{len(record.calls)} calls in {record.turns} turn(s)",
        label="run",
    )
    _prompts(doc, record.system_prompt, record.prompt, 1)
    doc.add(
        "text",
        "\n".join(tool_line(t.name, t.input_schema, t.description) for t in record.tools),
        label="tools",
        folded=True,
    )
    for number, call in enumerate(record.calls, 1):
        doc.add(
            "call",
            f"{call_line(call.tool, call.arguments)}   (turn {call.turn}, at {call.started_s:.3f}s, "
            f"took {call.seconds:.3f}s)",
            label=f"[{number}]",
        )
        if call.error is not None:
            doc.add("error", f"{call.error.error_type}: {call.error.message}")
        elif call.prompt is not None:
            doc.add("text", call.prompt, label="prompt (next turn)")
        else:
            doc.add("answer", call.result or "")
    doc.add(
        "field", f"{record.status} ({record.cause})" + (f": {record.reason}" if record.reason else ""), label="ended"
    )
    if record.scores:
        doc.add("field", ", ".join(f"{k}={v:g}" for k, v in record.scores.items()), label="scores")
    doc.add("field", "none (left out of training)" if record.reward is None else f"{record.reward:g}", label="reward")
    doc.add("field", ", ".join(f"{phase} {s:.3f}s" for phase, s in record.seconds.items()), label="seconds")
    if rollout is not None:
        known = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=False) if m and not math.isnan(lp)]
        logprobs = f"mean logprob {sum(known) / len(known):.3f}" if known else "logprobs not computed"
        doc.add(
            "field",
            f"{len(rollout.prompt_ids)} prompt ids, {len(rollout.completion_ids)} completion ids of "
            f"which {rollout.sampled} sampled; {logprobs}; truncated: {rollout.truncated or 'no'}",
            label="tokens",
        )
    return doc


def row_doc(row: dict[str, Any]) -> Doc:
    """A dataset row, readable: its task and where it stands, and its prompt's messages."""
    where = ", ".join(f"{key} {row[key]}" for key in ("split", "index", "environment") if key in row)
    doc = Doc().add("title", f"task {row.get('task_id', '?')}" + (f" ({where})" if where else ""))
    for message in row["prompt"]:
        role = message.get("role", "?")
        doc.add("text", str(message.get("content", "")), label=role, folded=role == "system")
    return doc


def rows_doc(rows: Any, limit: int) -> Doc:
    """A dataset's first `limit` rows as a table: index, task, split and the prompt's start."""
    shown = [rows[i] for i in range(min(limit, len(rows)))]
    doc = Doc().add("title", f"{len(rows)} rows" + (f" (the first {len(shown)})" if len(shown) < len(rows) else ""))
    table = tuple(
        (str(r.get("index", "")), str(r.get("task_id", "")), str(r.get("split", "")), _snippet(_user_prompt(r)))
        for r in shown
    )
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


def _ending(doc: Doc, final: ResetObservation | CallToolObservation, reward: float | None, reason: str | None) -> None:
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


def _show_frames_in_ipython() -> None:
    """In an IPython kernel, the frames show as their Docs (HTML, or Markdown where HTML is not
    shown), as `Displayed` objects do. Outside one there is nothing to register."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    formatters = shell.display_formatter.formatters
    render: dict[str, Callable[[Doc], str]] = {"text/html": Doc.html, "text/markdown": Doc.markdown}
    for mime, as_mime in render.items():
        for frame in (ResetObservation, CallToolObservation):
            formatters[mime].for_type(frame, lambda shown, as_mime=as_mime: as_mime(frame_doc(shown)))


_show_frames_in_ipython()
