"""The viewer's charts stay readable and bounded whatever the run's length: round y ticks fitted to
the values, ~10 step labels, the heatmap binned, ordered by pass rate, fresh tasks pooled, a legend."""

from __future__ import annotations

import re

from corral.cli.viewer.charts import (
    MARKERS_UP_TO,
    heatmap,
    layout,
    line_plot,
    moving_average,
    nice_ticks,
    smoothing_window,
)
from corral.client.run_views import Heatmap


def test_ticks_are_round_and_cover_the_values() -> None:
    assert nice_ticks(0.02, 0.11) == [0.02, 0.04, 0.06, 0.08, 0.1, 0.12]
    assert nice_ticks(0.03, 0.7) == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0, 999, 10, whole=True) == [n * 100 for n in range(11)]
    assert nice_ticks(3, 5, 10, whole=True) == [3, 4, 5]  # never a fraction of a step
    assert nice_ticks(0.5, 0.5)[0] < 0.5 < nice_ticks(0.5, 0.5)[-1]  # a flat series still has an axis


def test_the_plot_fits_y_to_the_data_and_labels_about_ten_steps() -> None:
    steps = list(range(1000))
    svg = line_plot(steps, {"mean reward": [0.02 + 0.09 * s / 999 for s in steps]})
    y_labels = re.findall(r'class="y-tick"[^>]*>([^<]*)<', svg)
    x_labels = re.findall(r'class="x-tick"[^>]*>([^<]*)<', svg)
    assert y_labels == ["0.02", "0.04", "0.06", "0.08", "0.1", "0.12"]  # not 0 and 1 alone
    assert 5 <= len(x_labels) <= 12 and x_labels[0] == "0"
    # every 17th point, its value on hover: 1,000 dots would be most of the page
    assert MARKERS_UP_TO - 2 <= len(re.findall("<circle", svg)) <= MARKERS_UP_TO


def test_the_moving_average_is_centred_and_cut_at_the_ends() -> None:
    assert moving_average([0, 0, 3, 0, 0], 3) == [0, 1, 1, 1, 0]
    assert moving_average([0, 0, 3, 0, 0], 4) == [1, 0.75, 0.75, 1, 0]  # one before, two after
    assert moving_average([0.5, 0.25], 1) == [0.5, 0.25]
    assert [smoothing_window(n) for n in (24, 39, 40, 157, 1000)] == [1, 1, 2, 7, 50]


def test_a_smoothed_series_draws_its_moving_average_over_the_faint_line_with_both_on_hover() -> None:
    steps = list(range(100))
    rewards = [float(s % 2) for s in steps]  # 0, 1, 0, 1 ...: the mean of 5 is 0.4 or 0.6 inside
    svg = line_plot(steps, {"mean reward": rewards, "pass@1": rewards}, smoothed=("mean reward",))
    lines = re.findall(r'<polyline class="smoothed"[^>]*points="([^"]*)"', svg)
    assert len(lines) == 1  # pass@1 is not smoothed
    heights = [float(point.split(",")[1]) for point in lines[0].split()]
    raw = [float(point.split(",")[1]) for point in re.findall(r'<polyline[^>]*points="([^"]*)"', svg)[0].split()]
    middle = (min(raw) + max(raw)) / 2  # the y of 0.5
    assert all(abs(h - middle) <= 0.1 * (max(raw) - min(raw)) + 0.1 for h in heights[2:-2])
    assert "mean reward (mean of 5)" in svg and "pass@1 (mean of" not in svg
    assert "<title>step 2: 0.000 (mean of 5: 0.400)</title>" in svg
    assert "<title>step 4: 0.000</title>" in svg  # every other point dotted; pass@1's dots: the value alone


def _grid(steps: int, tasks: dict[str, dict[int, tuple[int, int]]]) -> Heatmap:
    grid = Heatmap(list(range(steps)), sorted(tasks))
    for task, cells in tasks.items():
        for step, counts in cells.items():
            grid.counts[task, step] = counts
            grid.rates[task, step] = counts[1] / counts[0]
    return grid


def test_the_heatmap_orders_tasks_by_pass_rate_and_pools_the_tasks_seen_once() -> None:
    grid = _grid(
        3,
        {
            "a-hard": {0: (4, 0), 1: (4, 1)},
            "b-easy": {0: (4, 4), 2: (4, 3)},
            "c-fresh": {1: (4, 2)},
            "d-fresh": {2: (4, 0)},
        },
    )
    shown = layout(grid)
    assert shown.rows == [("b-easy", ["b-easy"]), ("a-hard", ["a-hard"]), ("2 tasks seen once", ["c-fresh", "d-fresh"])]
    assert shown.columns == [[0], [1], [2]] and shown.hidden == 0


def test_the_heatmap_bins_steps_and_leaves_off_rows_past_its_height() -> None:
    tasks = {f"task-{n:03}": {s: (8, n % 9) for s in range(0, 1000, 7)} for n in range(200)}
    grid = _grid(1000, tasks)
    shown = layout(grid, max_columns=50, max_rows=40)
    assert len(shown.columns) == 50 and shown.columns[1] == list(range(20, 40))
    assert len(shown.rows) == 40 and shown.hidden == 160
    svg = heatmap(grid)
    assert len(svg) < 200_000  # a full 50 x 40 grid, within the run page's 500 KB
    assert len(re.findall(r'class="x-tick"', svg)) <= 10
    assert "160 more tasks not shown" in svg and "20 steps a column" in svg
    # a binned cell pools its steps' counts: task-008 passes 8 of 8 at every step it was seen
    assert layout(grid).rows[0][0] == "task-008"


def test_the_heatmap_has_a_colour_legend() -> None:
    svg = heatmap(_grid(2, {"a": {0: (2, 1), 1: (2, 2)}}))
    assert "not scored" in svg and ">0.5</text>" in svg and ">1</text>" in svg


def test_a_run_page_of_1000_steps_stays_well_under_500_kb(tmp_path) -> None:
    from corral.cli.viewer.pages import run_page
    from corral.client.run_index import EpisodeFilter, RunIndex
    from corral.protocol.record_store import RecordWriter
    from corral.protocol.records import RolloutRecord

    writer = RecordWriter(tmp_path, "rollouts", run="run")
    for n in range(4000):  # 1,000 steps of one group of 4 over 200 tasks
        step, member = divmod(n, 4)
        rollout = RolloutRecord(
            episode_id=f"e{n}", task_id=f"task-{step % 200}", step=step, group=0, group_index=member, reward=n % 3 / 2
        )
        writer.write(rollout)
    writer.close()
    index = RunIndex(tmp_path)
    index.refresh()
    page = run_page(index, "run", EpisodeFilter(run="run"))
    index.close()
    assert page.count('class="smoothed"') == 1 and len(page.encode()) < 300_000
