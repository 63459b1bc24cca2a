"""The viewer's list pages: runs, one run (plot, heatmap, steps, episodes), a step's groups."""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from corral.client import run_views
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.server.viewer.charts import heatmap, line_plot
from corral.server.viewer.layout import filter_form, flags, number, page, query


def runs_page(index: RunIndex) -> str:
    rows = "".join(
        f"<tr><td><a class='run' href='/runs/{quote(r.run)}'>{escape(r.run)}</a></td><td>{r.episodes}</td>"
        f"<td>{r.steps}</td><td>{number(r.mean_reward)}</td></tr>"
        for r in run_views.runs(index)
    )
    return page(
        "Runs",
        f"<table id='runs'><tr><th>run</th><th>episodes</th><th>steps</th><th>mean reward</th></tr>{rows}</table>",
        live=EpisodeFilter(),
    )


STEP_ROWS = 100  # rows of the steps table on a run page (the plot and heatmap cover every step)


def run_page(index: RunIndex, run: str, where: EpisodeFilter) -> str:
    steps = [s for s in run_views.steps(index, run) if s.step is not None]
    plot = line_plot(
        [s.step for s in steps if s.step is not None],
        {"mean reward": [s.mean_reward for s in steps], "pass@1": [s.pass_at_1 for s in steps]},
    )
    step_rows = "".join(
        f"<tr><td><a class='step' href='/runs/{quote(run)}/steps/{s.step}'>{s.step}</a></td><td>{s.episodes}</td>"
        f"<td>{s.scored}</td><td class='mean-reward'>{number(s.mean_reward)}</td>"
        f"<td class='pass-at-1'>{number(s.pass_at_1)}</td><td>{s.groups}</td><td>{s.zero_variance}</td></tr>"
        for s in steps[-STEP_ROWS:]
    )
    older = f"<p>The newest {STEP_ROWS} of {len(steps)} steps.</p>" if len(steps) > STEP_ROWS else ""
    body = (
        f"<h2>Reward over steps</h2>{plot}<h2>Tasks x steps (pass rate)</h2>"
        f"{heatmap(run_views.heatmap(index, run))}<h2>Steps</h2><table id='steps'><tr><th>step</th><th>episodes</th>"
        "<th>scored</th><th>mean reward</th><th>pass@1</th><th>groups</th><th>zero-variance groups</th></tr>"
        f"{step_rows}</table>{older}{episodes_table(index, where)}"
    )
    return page(f"Run {run}", body, live=where)


def episodes_table(index: RunIndex, where: EpisodeFilter) -> str:
    rows = run_views.episodes(index, where)
    total = run_views.count(index, where)
    cells = "".join(
        f"<tr class='episode'><td><a href='/episodes/{e.episode_id}'>{e.episode_id[:12]}</a></td>"
        f"<td>{escape(e.task_id or '')}</td><td>{escape(e.split or '-')}</td><td>{'-' if e.step is None else e.step}</td>"
        f"<td>{'-' if e.group is None else e.group}</td><td>{number(e.reward)}</td><td>{number(e.advantage)}</td>"
        f"<td>{escape(e.status or '-')}</td><td>{escape(e.cause or '-')}</td><td>{number(e.seconds, 1)}</td>"
        f"<td>{flags(e.flags)}</td></tr>"
        for e in rows
    )
    action = f"/runs/{quote(where.run or '')}"
    downloads = " · ".join(
        f"<a class='export' href='{action}/export.jsonl?{escape(query(where, run=False))}&amp;kind={kind}'>{label}</a>"
        for kind, label in (("sft", "SFT rows"), ("prompts", "RL prompts"))
    )
    return (
        f"<h2>Episodes</h2>{filter_form(where, action)}"
        f"<p><span id='episode-count'>{total}</span> episodes match (newest {len(rows)} shown) · download "
        f"as {downloads} (one per prompt; add min_pass, max_pass, per_prompt, target, seed to the link)</p>"
        "<table id='episodes'><tr><th>episode</th><th>task</th><th>split</th><th>step</th><th>group</th>"
        "<th>reward</th><th>advantage</th><th>status</th><th>cause</th><th>seconds</th><th>flags</th></tr>"
        f"{cells}</table>"
    )


def step_page(index: RunIndex, run: str, step: int) -> str:
    rows = []
    for group in run_views.groups(index, run, step):
        rewards = ", ".join(number(m.reward) for m in group.members)
        advantages = ", ".join(number(m.advantage) for m in group.members)
        zero = " class='group zero'" if group.zero_variance else " class='group'"
        rows.append(
            f"<tr{zero}><td><a href='/runs/{quote(run)}/steps/{step}/groups/{group.group}'>{group.group}</a></td>"
            f"<td>{escape(group.task_id)}</td><td class='rewards'>{rewards}</td><td>{advantages}</td>"
            f"<td>{'zero variance: no signal' if group.zero_variance else ''}</td>"
            f"<td>{''.join(flags(m.flags) for m in group.members)}</td></tr>"
        )
    body = (
        "<table id='groups'><tr><th>group</th><th>task</th><th>rewards</th><th>advantages</th><th></th>"
        f"<th>flags</th></tr>{''.join(rows)}</table>"
    )
    return page(f"Run {run} · step {step}", body, live=EpisodeFilter(run=run, min_step=step, max_step=step))
