"""The viewer's list pages: runs, one run (plot, heatmap, steps, episodes), a step's groups."""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote

from corral.cli.viewer.charts import MAX_SERIES, heatmap, line_plot
from corral.cli.viewer.layout import filter_form, flags, number, page, place, query, search_box
from corral.client import run_views
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.protocol.records import RunHeader

COMPARED = MAX_SERIES  # runs one comparison overlays, a colour each


def runs_page(index: RunIndex) -> str:
    rows = "".join(
        f"<tr><td><input type='checkbox' name='run' value='{escape(r.run)}'> "
        f"<a class='run' href='/runs/{quote(r.run)}'>{escape(r.run)}</a></td>{_header_cells(r.header)}"
        f"<td>{r.episodes}</td><td>{r.steps}</td><td>{number(r.mean_reward)}</td></tr>"
        for r in run_views.runs(index)
    )
    return page(
        "Runs",
        "<form method='get' action='/compare'><table id='runs' data-live><tr><th>run</th><th>kind</th><th>model</th><th>bundle</th>"
        "<th>split</th><th>started</th><th>ended</th><th>episodes</th><th>steps</th><th>mean reward</th></tr>"
        f"{rows}</table><button type='submit'>compare the runs ticked (up to {COMPARED})</button></form>",
        live=EpisodeFilter(),
    )


def compare_page(index: RunIndex, runs: list[str]) -> str:
    """The mean reward per step of up to `COMPARED` runs, overlaid on one chart."""
    by_run = {run: {s.step: s.mean_reward for s in run_views.steps(index, run) if s.step is not None} for run in runs}
    axis = sorted({step for steps in by_run.values() for step in steps})
    series = {f"{run} mean reward": [steps.get(n) for n in axis] for run, steps in by_run.items()}
    links = " · ".join(f"<a class='run' href='/runs/{quote(run)}'>{escape(run)}</a>" for run in runs)
    return page(
        "Compare runs", f"<p>{links}</p><h2>Reward over steps</h2>{line_plot(axis, series, smoothed=tuple(series))}"
    )


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _header_cells(header: RunHeader | None) -> str:
    """kind, model, bundle, split, start and end; dashes for a run recorded without a header."""
    if header is None:
        return "<td class='kind'>-</td>" + "<td>-</td>" * 5
    kind = header.kind if header.step is None else f"{header.kind} @ step {header.step}"
    return (
        f"<td class='kind'>{escape(kind)}</td><td>{escape(header.model or '-')}</td>"
        f"<td>{escape(header.bundle or '-')}</td><td>{escape(header.split or '-')}</td>"
        f"<td>{_when(header.started_at)}</td><td>{_when(header.ended_at)}</td>"
    )


def _header_table(header: RunHeader | None) -> str:
    """What the run is, and the trainer's settings folded; nothing for a run without a header."""
    if header is None:
        return ""
    table = (
        "<table id='run-header'><tr><th>kind</th><th>model</th><th>bundle</th><th>split</th><th>started</th>"
        f"<th>ended</th></tr><tr>{_header_cells(header)}</tr></table>"
    )
    if not header.settings:
        return table
    cells = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in header.settings.items())
    return f"{table}<details><summary>settings</summary><table id='settings'>{cells}</table></details>"


TRAINER_PLOTS = (  # the trainer's logged values plotted on a run page, when recorded (`RecordMetrics`)
    "loss",
    "kl",
    "entropy",
    "grad_norm",
    "clip_ratio/region_mean",
    "completions/mean_length",
    "completions/clipped_ratio",
    "rollouts/groups_zero_variance",
    "rollouts/unscored",
)
STEP_ROWS = 100  # rows of the steps table on a run page (the plot and heatmap cover every step)
TASK_ROWS = 200  # rows of the tasks table: the most often scored (the episodes' task filter finds any)


def run_page(index: RunIndex, run: str, where: EpisodeFilter) -> str:
    steps = [s for s in run_views.steps(index, run) if s.step is not None]
    header, evals = index.header(run), run_views.eval_rewards(index, run)
    by_step = {s.step: s for s in steps if s.step is not None}
    axis = sorted({*by_step, *evals})  # an eval may be of a checkpoint between the steps played
    series = {
        "mean reward": [by_step[n].mean_reward if n in by_step else None for n in axis],
        "pass@1": [by_step[n].pass_at_1 if n in by_step else None for n in axis],
    }
    if evals:
        series["eval mean reward"] = [evals.get(n) for n in axis]
    plot = line_plot(axis, series, smoothed=("mean reward",))
    step_rows = "".join(
        f"<tr><td><a class='step' href='/runs/{quote(run)}/steps/{s.step}'>{s.step}</a></td><td>{s.episodes}</td>"
        f"<td>{s.scored}</td><td class='mean-reward'>{number(s.mean_reward)}</td>"
        f"<td class='pass-at-1'>{number(s.pass_at_1)}</td><td>{s.groups}</td><td>{s.zero_variance}</td></tr>"
        for s in steps[-STEP_ROWS:]
    )
    older = f"The newest {STEP_ROWS} of {len(steps)} steps." if len(steps) > STEP_ROWS else ""
    grid = run_views.heatmap(index, run)
    body = (
        f"{_header_table(header)}"
        f"<div id='charts' data-live><h2>Reward over steps</h2>{plot}{trainer_plots(index.metrics(run))}"
        f"<h2>Tasks x steps (pass rate)</h2>{heatmap(grid)}</div><h2>Steps</h2>{search_box('steps', 'search steps')}<table id='steps' class='sortable'>"
        "<tr><th>step</th><th>episodes</th><th>scored</th><th>mean reward</th><th>pass@1</th><th>groups</th>"
        f"<th>zero-variance groups</th></tr>{step_rows}</table><p id='older' data-live>{older}</p>{tasks_table(run_views.tasks(grid))}"
        f"{episodes_table(index, where)}"
    )
    return page(f"Run {run}", body, live=where, crumbs=place(run))


def trainer_plots(metrics: dict[str, dict[int, float]]) -> str:
    """One small plot per recorded trainer metric of `TRAINER_PLOTS` (their scales differ)."""
    plots = [
        line_plot(
            sorted(metrics[name]), {name: [metrics[name][n] for n in sorted(metrics[name])]}, width=380, height=160
        )
        for name in TRAINER_PLOTS
        if metrics.get(name)
    ]
    return f"<h2>Trainer</h2><div id='trainer'>{''.join(plots)}</div>" if plots else ""


def tasks_table(tasks: list[run_views.TaskRow]) -> str:
    """The run's scored tasks, `TASK_ROWS` of them at most, sortable and searchable."""
    rows = "".join(  # end tags left out (HTML allows it): 200 rows in 10 KB
        f"<tr><td>{escape(t.task_id)}<td>{t.steps}<td>{t.scored}<td>{t.pass_rate:.3f}<td>{t.first_step}<td>{t.mark}"
        for t in tasks[:TASK_ROWS]
    )
    more = f"The {TASK_ROWS} most often scored of {len(tasks)} tasks." if len(tasks) > TASK_ROWS else ""
    return (
        f"<h2>Tasks</h2>{search_box('tasks', 'search tasks')}<table id='tasks' class='sortable'><tr><th>task</th>"
        f"<th>steps</th><th>scored</th><th>pass rate</th><th>first step</th><th></th></tr>{rows}</table>"
        f"<p id='more-tasks' data-live>{more}</p>"
    )


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
        f"<p id='matched' data-live><span id='episode-count'>{total}</span> episodes match (newest {len(rows)} shown) · download "
        f"as {downloads} (one per prompt; add min_pass, max_pass, per_prompt, target, seed to the link)</p>"
        f"{search_box('episodes', 'search these episodes')}<table id='episodes' class='sortable'><tr><th>episode</th><th>task</th><th>split</th><th>step</th><th>group</th>"
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
    before, after = run_views.neighbours(index, run, step)
    at = f"/runs/{quote(run)}/steps"
    around = " · ".join(
        [f"<a id='previous' href='{at}/{before}'>← step {before}</a>"] * (before is not None)
        + [f"<a id='next' href='{at}/{after}'>step {after} →</a>"] * (after is not None)
    )
    body = (
        f"<p id='around' data-live>{around}</p>"
        f"{search_box('groups', 'search groups')}<table id='groups' class='sortable'><tr><th>group</th><th>task</th><th>rewards</th><th>advantages</th><th></th>"
        f"<th>flags</th></tr>{''.join(rows)}</table>"
    )
    return page(
        f"Run {run} · step {step}",
        body,
        live=EpisodeFilter(run=run, min_step=step, max_step=step),
        crumbs=place(run, step),
    )
