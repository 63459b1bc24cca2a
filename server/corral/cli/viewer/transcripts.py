"""The viewer's record pages: one episode in full, and a group's members side by side with the
message where their transcripts first differ marked."""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote

from corral.cli.viewer.layout import flags, number, page, place
from corral.cli.viewer.tokens import TokenText, token_chips
from corral.client import run_views
from corral.client.record_exports import conversation
from corral.client.run_index import RunIndex
from corral.protocol.records import EpisodeRecord

_PHASES = {"start": "#6366f1", "reset": "#0ea5e9", "tools": "#10b981", "verify": "#f59e0b"}


def episode_page(index: RunIndex, episode_id: str, text: TokenText | None = None) -> str | None:
    episode, rollout = index.records(episode_id)
    if episode is None and rollout is None:
        return None
    parts = []
    if rollout is not None:
        parts.append(
            f"<p id='place'>member {rollout.group_index} · policy version {rollout.policy_version} · "
            f"advantage <span id='advantage'>{number(rollout.advantage)}</span></p>"
        )
    if episode is not None:
        parts.append(_server_side(episode, index))
    if rollout is not None and (rollout.prompt_ids or rollout.completion_ids):
        parts.append(token_chips(rollout, text))
    elif rollout is not None:  # an environment's record (AsyncGRPO): the trainer kept the tokens
        parts.append(
            "<p id='no-tokens'>No tokens: this rollout was recorded by its environment, "
            "and the trainer kept its tokens.</p>"
        )
    task = episode.task_id if episode is not None else rollout.task_id  # type: ignore[union-attr]
    # A served-only episode knows its server's run, not a step or group.
    crumbs = place(rollout.run, rollout.step, rollout.group) if rollout is not None else place(episode.run)  # type: ignore[union-attr]
    crumbs.append(("episode", episode_id[:12], f"/episodes/{quote(episode_id)}"))
    return page(f"Episode {episode_id[:12]} · {task}", "".join(parts), crumbs=crumbs)


def _server_side(episode: EpisodeRecord, index: RunIndex) -> str:
    tools = "".join(f"<li><b>{escape(t.name)}</b>: {escape(t.description)}</li>" for t in episode.tools)
    calls = "".join(
        f"<tr class='call'><td>{n}</td><td>{escape(c.tool)}</td><td><code>{escape(json.dumps(c.arguments))}</code></td>"
        f"<td>{_answer(c)}</td><td>{c.turn}</td><td>{c.started_s:.3f}</td><td>{c.seconds:.3f}</td></tr>"
        for n, c in enumerate(episode.calls, 1)
    )
    scores = "".join(f"<tr><td>{escape(k)}</td><td>{v:.3f}</td></tr>" for k, v in episode.scores.items())
    row = index.query("SELECT flags FROM played WHERE episode_id = ?", (episode.episode_id,))
    return (
        f"<p>split {escape(episode.split or '-')} · sandbox {escape(episode.sandbox)} · {episode.turns} turn(s) · "
        f"flags {flags(row[0][0] if row else '')}</p>"
        f"<h2>Prompt</h2><div class='msg'>{escape(episode.system_prompt)}</div><div class='msg'>{escape(episode.prompt)}</div>"
        f"<h2>Tools</h2><ul>{tools}</ul><h2>Calls</h2><table id='calls'><tr><th>#</th><th>tool</th><th>arguments</th>"
        f"<th>answer or error</th><th>turn</th><th>at (s)</th><th>took (s)</th></tr>{calls}</table>"
        f"<h2>Ending</h2><p id='ending'>{escape(episode.status)} ({escape(episode.cause)})"
        f"{': ' + escape(episode.reason) if episode.reason else ''}</p>"
        f"<p>reward <span id='reward'>{number(episode.reward)}</span></p><table id='scores'>{scores}</table>"
        f"<h2>Seconds by phase</h2>{_timeline(episode.seconds)}"
    )


def _answer(call: Any) -> str:
    if call.error is not None:
        return f"<span class='flag'>{escape(call.error.error_type)}</span> {escape(call.error.message)}"
    return escape(call.result or call.prompt or "")


def _timeline(seconds: dict[str, float]) -> str:
    total = seconds.get("total") or sum(v for k, v in seconds.items() if k in _PHASES) or 1.0
    bars = "".join(
        f"<div style='width:{100 * seconds[p] / total:.1f}%;background:{c}' title='{p}: {seconds[p]:.3f} s'>{p}</div>"
        for p, c in _PHASES.items()
        if seconds.get(p)
    )
    listed = ", ".join(f"{k} {v:.3f}" for k, v in seconds.items())
    return f"<div class='timeline'>{bars}</div><p id='seconds'>{escape(listed)}</p>"


def group_page(index: RunIndex, run: str, step: int, number_: int) -> str | None:
    found = run_views.group(index, run, step, number_)
    if found is None:
        return None
    transcripts = []
    for member in found.members:
        episode, rollout = index.records(member.episode_id)
        messages = conversation(episode, rollout)[0] if episode is not None else (rollout.messages if rollout else [])
        transcripts.append([json.dumps(m, sort_keys=True, default=str) for m in messages])
    first = _first_difference(transcripts)
    columns = []
    for member, encoded in zip(found.members, transcripts, strict=True):
        shown = "".join(
            f"<div class='msg{' differs' if n == first else ''}'>{escape(_text(m))}</div>"
            for n, m in enumerate(encoded)
        )
        columns.append(
            f"<div class='member'><p><a href='/episodes/{member.episode_id}'>member {member.group_index}</a>"
            f" · reward {number(member.reward)} · advantage {number(member.advantage)} {flags(member.flags)}"
            f"</p>{shown}</div>"
        )
    note = "identical transcripts" if first is None else f"first difference at message {first + 1} (marked red)"
    return page(
        f"Run {run} · step {step} · group {number_} · {found.task_id}",
        f"<p id='difference'>{note}</p><div class='members'>{''.join(columns)}</div>",
        crumbs=place(run, step, number_),
    )


def _first_difference(transcripts: list[list[str]]) -> int | None:
    longest = max((len(t) for t in transcripts), default=0)
    for n in range(longest):
        if len({t[n] if n < len(t) else None for t in transcripts}) > 1:
            return n
    return None


def _text(encoded: str) -> str:
    message = json.loads(encoded)
    calls = "".join(
        f"\n-> {c.get('function', c).get('name')}({json.dumps(c.get('function', c).get('arguments'))})"
        for c in message.get("tool_calls") or []
    )
    return f"[{message.get('role')}] {message.get('content') or ''}{calls}"
