"""The run index: run -> step -> group -> episode, read lazily from the records and kept up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.client import run_views
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import EpisodeRecord, RecordedCall, RolloutRecord

# step -> group -> (task, rewards of its two members)
PLAN = {0: [("add", [0.0, 1.0]), ("sub", [0.0, 0.0])], 1: [("add", [1.0, 1.0]), ("sub", [0.0, 1.0])]}


def _record(records: Path, run: str = "run-a") -> None:
    server, trainer = RecordWriter(records, "episodes", run="server"), RecordWriter(records, "rollouts", run=run)
    for step, groups in PLAN.items():
        for number, (task, rewards) in enumerate(groups):
            for member, reward in enumerate(rewards):
                episode_id = f"{run}-{step}-{number}-{member}"
                server.write(
                    EpisodeRecord(
                        episode_id=episode_id,
                        task_id=task,
                        status="scored",
                        cause="scored",
                        reward=reward,
                        split="train",
                        seconds={"total": 2.0},
                    )
                )
                trainer.write(
                    RolloutRecord(
                        episode_id=episode_id,
                        task_id=task,
                        reward=reward,
                        step=step,
                        policy_version=step,
                        group=number,
                        group_index=member,
                        advantage=reward - sum(rewards) / 2,
                    )
                )
    server.close()
    trainer.close()


def test_steps_report_mean_reward_pass_at_1_and_zero_variance_groups(tmp_path: Path) -> None:
    _record(tmp_path)
    index = RunIndex(tmp_path)
    assert [r.run for r in run_views.runs(index)] == ["run-a"]
    first, second = run_views.steps(index, "run-a")
    assert (first.step, first.episodes, first.mean_reward, first.pass_at_1) == (0, 4, 0.25, 0.25)
    assert (first.groups, first.zero_variance) == (2, 1)
    assert (second.mean_reward, second.pass_at_1, second.zero_variance) == (0.75, 0.75, 1)


def test_the_heatmap_marks_tasks_never_solved_and_too_easy(tmp_path: Path) -> None:
    _record(tmp_path)
    grid = run_views.heatmap(RunIndex(tmp_path), "run-a")
    assert grid.rates == {("add", 0): 0.5, ("add", 1): 1.0, ("sub", 0): 0.0, ("sub", 1): 0.5}
    assert grid.counts[("add", 0)] == (2, 1)  # (scored, passed): what a binned heatmap column pools
    assert grid.marks == {}
    _record(tmp_path, run="run-b")  # the same plan, but only task "sub" at step 0 in a filter below
    index = RunIndex(tmp_path)
    assert [
        (e.task_id, e.step) for e in run_views.episodes(index, EpisodeFilter(run="run-b", max_step=0, task="sub"))
    ] == [("sub", 0)] * 2


def test_a_group_lists_its_members_with_rewards_and_advantages_and_loads_one_on_demand(tmp_path: Path) -> None:
    _record(tmp_path)
    index = RunIndex(tmp_path)
    found = run_views.group(index, "run-a", 0, 0)
    assert found is not None and found.task_id == "add" and not found.zero_variance
    assert [(m.group_index, m.reward, m.advantage) for m in found.members] == [(0, 0.0, -0.5), (1, 1.0, 0.5)]
    episode, rollout = index.records(found.members[1].episode_id)
    assert episode is not None and rollout is not None
    assert (episode.reward, rollout.group, rollout.step) == (1.0, 0, 0)


def test_the_index_follows_a_file_being_written_and_rebuilds_one_rewritten(tmp_path: Path) -> None:
    _record(tmp_path)
    index = RunIndex(tmp_path)
    assert run_views.count(index, EpisodeFilter(run="run-a")) == 8
    rollouts = next(tmp_path.glob("run-a/rollouts-*.jsonl"))
    lines = rollouts.read_bytes().splitlines(keepends=True)
    extra = RolloutRecord(episode_id="late", run="run-a", task_id="add", reward=1.0, step=2, group=0, group_index=0)
    line = extra.model_dump_json().encode() + b"\n"
    with open(rollouts, "ab") as file:  # a trainer half way through writing a line
        file.write(line[:20])
    assert run_views.count(index, EpisodeFilter(run="run-a")) == 8
    with open(rollouts, "ab") as file:
        file.write(line[20:])
    assert run_views.count(index, EpisodeFilter(run="run-a", min_step=2)) == 1
    rollouts.write_bytes(b"".join(lines[:2]))  # rewritten shorter: its rows are indexed again
    assert index.refresh() == 2
    assert run_views.count(index, EpisodeFilter(run="run-a", min_step=0)) == 2


@pytest.mark.parametrize(
    ("tool", "arguments", "flag"),
    [
        ("write_file", {"path": "tests/test_solution.py", "content": "pass"}, "writes_tests"),
        ("bash", {"command": "echo ok > verifier/expected.txt"}, "writes_tests"),
        ("bash", {"command": "cat tests/test_solution.py"}, None),
    ],
)
def test_writes_to_test_paths_are_flagged(tmp_path: Path, tool: str, arguments: dict, flag: str | None) -> None:
    writer = RecordWriter(tmp_path, "episodes", run="server")
    calls = [RecordedCall(tool=tool, arguments=arguments)] * 2
    writer.write(EpisodeRecord(episode_id="e", task_id="t", status="scored", cause="scored", reward=0.0, calls=calls))
    writer.close()
    (row,) = run_views.episodes(RunIndex(tmp_path), EpisodeFilter())
    assert row.flags == (flag or "")


def test_a_step_page_leads_to_the_steps_around_it_and_an_episode_to_its_run_step_and_group(tmp_path: Path) -> None:
    from corral.cli.viewer.pages import step_page
    from corral.cli.viewer.transcripts import episode_page

    _record(tmp_path)
    index = RunIndex(tmp_path)
    first, last = step_page(index, "run-a", 0), step_page(index, "run-a", 1)
    assert "<a id='next' href='/runs/run-a/steps/1'>" in first and "id='previous'" not in first
    assert "<a id='previous' href='/runs/run-a/steps/0'>" in last and "id='next'" not in last
    page = episode_page(index, "run-a-1-1-0")
    assert page is not None
    for target in ("/runs/run-a'", "/runs/run-a/steps/1'", "/runs/run-a/steps/1/groups/1'"):
        assert f"href='{target}" in page
