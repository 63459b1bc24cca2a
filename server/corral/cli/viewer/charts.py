"""Charts drawn as inline SVG (no script, no asset from the internet): a line plot of values over
steps, and a tasks x steps heatmap of pass rates. Both stay a bounded size whatever the number of
steps or tasks: ~10 axis labels, steps binned into columns, tasks past a height left off with a note."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from corral.client.run_views import Heatmap

_COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea")
MAX_SERIES = len(_COLOURS)  # series one plot draws, a colour each
_EMPTY = "#eee"
MARKERS_UP_TO = 60  # dots per series, each with its value on hover (past this, every k-th point)
SMOOTHED_SHARE = 20  # a smoothed line averages over 1/20 of the series' points (none under 40 points)


def smoothing_window(points: int) -> int:
    """The moving average's window for a series of `points`: a twentieth of them, at least 1."""
    return max(1, points // SMOOTHED_SHARE)


def moving_average(values: list[float], window: int) -> list[float]:
    """Each value's centred mean over the `window` values around it (fewer at the ends, where the
    window is cut)."""
    sums = [0.0]
    for value in values:
        sums.append(sums[-1] + value)
    before, after = (window - 1) // 2, window // 2
    spans = [(max(0, n - before), min(len(values), n + after + 1)) for n in range(len(values))]
    return [(sums[high] - sums[low]) / (high - low) for low, high in spans]


def nice_ticks(low: float, high: float, count: int = 5, *, whole: bool = False) -> list[float]:
    """About `count` round values (1, 2, 2.5 or 5 x 10^n apart) from at or below `low` to at or above
    `high`; `whole` keeps the spacing a whole number (for steps)."""
    if high <= low:
        low, high = (low - 0.5, high + 0.5) if not whole else (low, low + 1)
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    spacing = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    if whole:
        spacing = max(1, math.ceil(spacing))
    first, last = math.floor(low / spacing + 1e-9), math.ceil(high / spacing - 1e-9)
    return [round(n * spacing, 10) for n in range(first, last + 1)]


def _label(value: float) -> str:
    return f"{value:g}"


def line_plot(
    steps: list[int],
    series: dict[str, list[float | None]],
    *,
    width: int = 560,
    height: int = 200,
    smoothed: tuple[str, ...] = (),
) -> str:
    """Each series over the steps, y fitted to the values with round ticks, ~10 step labels, a legend;
    the series named in `smoothed` drawn faint with their moving average (`smoothing_window`) over them."""
    pad, left = 32, 44
    values = [v for vs in series.values() for v in vs if v is not None]
    if not steps or not values:
        return "<p>No steps yet.</p>"
    first, span = min(steps), max(steps) - min(steps) or 1
    y_ticks = nice_ticks(min(values), max(values))
    low, high = y_ticks[0], y_ticks[-1]

    def x(step: float) -> float:
        return left + (step - first) / span * (width - left - pad)

    def y(value: float) -> float:
        return height - pad - (value - low) / (high - low) * (height - 2 * pad)

    parts = [
        f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<line x1="{left}" y1="{y(low)}" x2="{width - pad}" y2="{y(low)}" stroke="#999"/>',
        f'<line x1="{left}" y1="{y(low)}" x2="{left}" y2="{y(high)}" stroke="#999"/>',
    ]
    for tick in y_ticks:
        parts.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{width - pad}" y2="{y(tick):.1f}" stroke="#eee"/>'
            f'<text class="y-tick" x="{left - 4}" y="{y(tick) + 4:.1f}" font-size="10" text-anchor="end">'
            f"{_label(tick)}</text>"
        )
    for tick in nice_ticks(first, max(steps), 10, whole=True):
        if first <= tick <= max(steps):
            parts.append(
                f'<text class="x-tick" x="{x(tick):.1f}" y="{height - 10}" font-size="10" text-anchor="middle">'
                f"{_label(tick)}</text>"
            )
    for index, (colour, (name, points)) in enumerate(zip(_COLOURS, series.items(), strict=False)):
        drawn = [(s, v) for s, v in zip(steps, points, strict=True) if v is not None]
        window = smoothing_window(len(drawn)) if name in smoothed else 1
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in drawn)
        raw = ' stroke-width="1" stroke-opacity=".35"' if window > 1 else ' stroke-width="2"'
        parts.append(f'<polyline fill="none" stroke="{colour}"{raw} points="{path}"/>')
        means = moving_average([v for _, v in drawn], window) if window > 1 else []
        if means:
            line = " ".join(f"{x(s):.1f},{y(m):.1f}" for (s, _), m in zip(drawn, means, strict=True))
            parts.append(f'<polyline class="smoothed" fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>')
        every = math.ceil(len(drawn) / MARKERS_UP_TO) or 1
        for n in range(0, len(drawn), every):
            s, v = drawn[n]
            mean = f" (mean of {window}: {means[n]:.3f})" if means else ""
            parts.append(
                f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="{3 if every == 1 else 2}" fill="{colour}">'
                f"<title>step {s}: {v:.3f}{mean}</title></circle>"
            )
        label = f"{name} (mean of {window})" if window > 1 else name
        parts.append(
            f'<text x="{width - 150}" y="{14 + 14 * index}" font-size="11" fill="{colour}">{escape(label)}</text>'
        )
    return "".join(parts) + "</svg>"


@dataclass(frozen=True)
class HeatmapLayout:
    columns: list[list[int]]  # the steps binned into each column, in order
    rows: list[tuple[str, list[str]]]  # (label, the tasks it pools), most solved first
    hidden: int  # tasks left off past the height


def layout(grid: Heatmap, *, max_columns: int = 50, max_rows: int = 40) -> HeatmapLayout:
    """Bins the steps into at most `max_columns` columns; orders tasks by pass rate over the run (ties
    by name), pools the tasks seen at one step only into one row (a run of fresh tasks per step), and
    keeps at most `max_rows` rows."""
    size = max(1, math.ceil(len(grid.steps) / max_columns))
    columns = [grid.steps[n : n + size] for n in range(0, len(grid.steps), size)]
    seen: dict[str, list[int]] = {task: [0, 0, 0] for task in grid.tasks}  # steps, scored, passed
    for (task, _), (scored, passed) in grid.counts.items():
        seen[task][0] += 1
        seen[task][1] += scored
        seen[task][2] += passed
    once = [task for task in grid.tasks if seen[task][0] <= 1]
    kept = sorted(
        (task for task in grid.tasks if seen[task][0] > 1),
        key=lambda task: (-(seen[task][2] / seen[task][1]) if seen[task][1] else 1.0, task),
    )
    rows = [(task, [task]) for task in kept]
    if once:
        rows.append((f"{len(once)} tasks seen once", once) if len(once) > 1 else (once[0], once))
    return HeatmapLayout(columns, rows[:max_rows], max(0, len(rows) - max_rows))


def shade(rate: float) -> str:
    purple, green = int(230 - 200 * rate), int(120 + 100 * rate)
    return f"#{purple:02x}{green:02x}{purple:02x}"  # hex, as a 1,000-step heatmap has 2,000 cells


def heatmap(grid: Heatmap, *, cell: int = 14, max_columns: int = 50, max_rows: int = 40) -> str:
    """Tasks (rows) x steps (columns, binned past `max_columns`), each cell's shade its pass rate, with
    ~10 step labels, a colour legend and marked tasks named at the end."""
    if not grid.steps:
        return "<p>No steps yet.</p>"
    shown = layout(grid, max_columns=max_columns, max_rows=max_rows)
    label, top_pad = 160, 16
    right = label + cell * len(shown.columns)
    width, height = right + 110, top_pad + cell * len(shown.rows) + 40
    parts = [f'<svg class="heatmap" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    every = max(1, math.ceil(len(shown.columns) / 10))
    for column, steps in enumerate(shown.columns):
        if column % every == 0:
            parts.append(f'<text class="x-tick" x="{label + column * cell}" y="12" font-size="10">{steps[0]}</text>')
    for row, (name, tasks) in enumerate(shown.rows):
        top = top_pad + cell * row
        parts.append(
            f'<text x="0" y="{top + cell - 3}" font-size="11"><title>{escape(", ".join(tasks[:20]))}</title>'
            f"{escape(name[:24])}</text>"
            f'<rect x="{label}" y="{top}" width="{cell * len(shown.columns) - 1}" height="{cell - 1}" fill="{_EMPTY}"/>'
        )
        for column, steps in enumerate(shown.columns):
            counts = [grid.counts[t, s] for t in tasks for s in steps if (t, s) in grid.counts]
            scored = sum(c[0] for c in counts)
            if scored:
                rate = sum(c[1] for c in counts) / scored
                parts.append(
                    f'<rect x="{label + column * cell}" y="{top}" width="{cell - 1}" height="{cell - 1}" '
                    f'fill="{shade(rate)}"><title>{rate:.2f}</title></rect>'
                )
        if len(tasks) == 1 and tasks[0] in grid.marks:
            parts.append(
                f'<text class="mark" x="{right + 6}" y="{top + cell - 3}" font-size="11">{grid.marks[tasks[0]]}</text>'
            )
    bottom = top_pad + cell * len(shown.rows) + 8
    for n, rate in enumerate((0.0, 0.25, 0.5, 0.75, 1.0)):
        parts.append(
            f'<rect x="{label + n * 40}" y="{bottom}" width="12" height="12" fill="{shade(rate)}"/>'
            f'<text x="{label + n * 40 + 15}" y="{bottom + 10}" font-size="10">{_label(rate)}</text>'
        )
    parts.append(
        f'<rect class="legend" x="{label + 200}" y="{bottom}" width="12" height="12" fill="{_EMPTY}"/>'
        f'<text x="{label + 215}" y="{bottom + 10}" font-size="10">not scored</text>'
    )
    if len(shown.columns[0]) > 1:
        parts.append(f'<text x="0" y="{bottom + 26}" font-size="10">{len(shown.columns[0])} steps a column</text>')
    if shown.hidden:
        parts.append(f'<text x="{label}" y="{bottom + 26}" font-size="10">{shown.hidden} more tasks not shown</text>')
    return "".join(parts) + "</svg>"
