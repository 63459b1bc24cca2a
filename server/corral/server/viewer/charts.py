"""Charts drawn as inline SVG (no script, no asset from the internet): a line plot of values over
steps, and a tasks x steps heatmap of pass rates."""

from __future__ import annotations

from html import escape

from corral.client.run_views import Heatmap

_COLOURS = ("#2563eb", "#dc2626")


def line_plot(steps: list[int], series: dict[str, list[float | None]], *, width: int = 560, height: int = 200) -> str:
    """Each series over the steps, on a 0..1 axis (rewards and pass rates), with a legend."""
    pad = 32
    if not steps:
        return "<p>No steps yet.</p>"
    span = max(steps) - min(steps) or 1

    def x(step: int) -> float:
        return pad + (step - min(steps)) / span * (width - 2 * pad)

    def y(value: float) -> float:
        return height - pad - max(0.0, min(1.0, value)) * (height - 2 * pad)

    parts = [
        f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<line x1="{pad}" y1="{y(0)}" x2="{width - pad}" y2="{y(0)}" stroke="#999"/>',
        f'<line x1="{pad}" y1="{y(0)}" x2="{pad}" y2="{y(1)}" stroke="#999"/>',
        f'<text x="4" y="{y(1) + 4}" font-size="10">1</text><text x="4" y="{y(0) + 4}" font-size="10">0</text>',
    ]
    for colour, (name, values) in zip(_COLOURS, series.items(), strict=False):
        points = [(x(s), y(v)) for s, v in zip(steps, values, strict=True) if v is not None]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in points]
        index = list(series).index(name)
        parts.append(
            f'<text x="{width - 150}" y="{14 + 14 * index}" font-size="11" fill="{colour}">{escape(name)}</text>'
        )
    parts += [f'<text x="{x(s) - 3:.1f}" y="{height - 10}" font-size="10">{s}</text>' for s in steps]
    return "".join(parts) + "</svg>"


def heatmap(grid: Heatmap, *, cell: int = 18) -> str:
    """Tasks (rows) x steps (columns), each cell's shade its pass rate; marked tasks named at the end."""
    label = 160
    width, height = label + cell * len(grid.steps) + 110, cell * (len(grid.tasks) + 1)
    parts = [f'<svg class="heatmap" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for column, step in enumerate(grid.steps):
        parts.append(f'<text x="{label + column * cell + 3}" y="12" font-size="10">{step}</text>')
    for row, task in enumerate(grid.tasks):
        top = cell * (row + 1)
        parts.append(f'<text x="0" y="{top + 13}" font-size="11">{escape(task[:24])}</text>')
        for column, step in enumerate(grid.steps):
            rate = grid.rates.get((task, step))
            fill = (
                "#eee"
                if rate is None
                else f"rgb({int(230 - 200 * rate)},{int(120 + 100 * rate)},{int(230 - 200 * rate)})"
            )
            title = "no scored episode" if rate is None else f"{task} at step {step}: pass rate {rate:.2f}"
            parts.append(
                f'<rect x="{label + column * cell}" y="{top}" width="{cell - 1}" height="{cell - 1}" '
                f'fill="{fill}"><title>{escape(title)}</title></rect>'
            )
        if task in grid.marks:
            parts.append(
                f'<text class="mark" x="{label + cell * len(grid.steps) + 6}" y="{top + 13}" font-size="11">'
                f"{grid.marks[task]}</text>"
            )
    return "".join(parts) + "</svg>"
