"""Exports by difficulty on records whose pass rates per step window are known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.client.difficulty_exports import (
    Difficulty,
    choose,
    openai_message,
    pass_rates,
    rl_prompts,
    sft_rows,
)
from corral.client.run_index import RunIndex
from corral.errors import ConfigError
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import EpisodeRecord, RecordedCall, RolloutRecord

STEPS, GROUP = 10, 4


def _passes(task: str, step: int, member: int) -> bool:
    return {"easy": True, "learnt": step >= 5, "hard": member == 0, "never": False}[task]


@pytest.fixture
def index(tmp_path: Path) -> RunIndex:
    """Run a: four tasks, ten steps, groups of four. easy always passes, learnt from step 5 on,
    hard one member in four, never none. Run b samples `learnt` again (the same prompt)."""
    server = RecordWriter(tmp_path, "episodes", run="server")
    for run, tasks in (("run-a", ["easy", "learnt", "hard", "never"]), ("run-b", ["learnt"])):
        trainer = RecordWriter(tmp_path, "rollouts", run=run)
        for step in range(STEPS):
            for group, task in enumerate(tasks):
                for member in range(GROUP):
                    episode_id = f"{run}-{task}-{step}-{member}"
                    reward = 1.0 if _passes(task, step, member) else 0.0
                    calls = [RecordedCall(tool="lookup", arguments={"n": n}, result="ok") for n in range(member * 5)]
                    server.write(
                        EpisodeRecord(
                            episode_id=episode_id,
                            task_id=task,
                            split="train",
                            prompt=f"do {task}",
                            status="scored",
                            cause="scored",
                            reward=reward,
                            calls=calls,
                            tool_calls=len(calls),
                        )
                    )
                    trainer.write(
                        RolloutRecord(
                            episode_id=episode_id,
                            task_id=task,
                            reward=reward,
                            step=step,
                            group=group,
                            group_index=member,
                            policy_version=step,
                        )
                    )
        trainer.close()
    server.close()
    return RunIndex(tmp_path)


def test_pass_rates_are_read_over_the_window_of_steps(index: RunIndex) -> None:
    early = pass_rates(index, Difficulty(max_step=4), runs=["run-a"])
    assert early == {"easy": 1.0, "learnt": 0.0, "hard": 0.25, "never": 0.0}
    assert pass_rates(index, Difficulty(min_step=5), runs=["run-a"])["learnt"] == 1.0
    assert pass_rates(index, Difficulty(), runs=["run-a"])["learnt"] == 0.5


def test_the_band_picks_the_tasks_by_their_pass_rate_in_the_window(index: RunIndex) -> None:
    band = {"min_pass": 0.1, "max_pass": 0.9, "per_prompt": 100}
    assert {c.task_id for c in choose(index, Difficulty(**band, max_step=4), passed_only=True)} == {"hard"}
    whole = choose(index, Difficulty(**band), passed_only=True)
    assert {c.task_id for c in whole} == {"learnt", "hard"}
    assert all(c.reward == 1.0 for c in whole)
    assert len(whole) == 40 + 10  # learnt: 5 passing steps x 4 members x 2 runs; hard: 1 member x 10 steps


def test_the_rows_for_a_seed_are_exactly_these(index: RunIndex) -> None:
    choice = Difficulty(min_pass=0.1, max_pass=0.9, per_prompt=2, seed=7)
    chosen = [c.episode_id for c in choose(index, choice, passed_only=True)]
    # Each prompt's first row, then each one's second: learnt's from its passing steps (5-9), hard's member 0.
    assert chosen == ["run-a-learnt-7-2", "run-a-hard-2-0", "run-a-learnt-6-3", "run-a-hard-4-0"]
    assert chosen == [c.episode_id for c in choose(index, choice, passed_only=True)]  # the same again
    assert chosen != [
        c.episode_id
        for c in choose(index, Difficulty(min_pass=0.1, max_pass=0.9, per_prompt=2, seed=8), passed_only=True)
    ]


def test_the_target_gives_every_prompt_its_first_row_before_any_its_second(index: RunIndex) -> None:
    for target in range(1, 7):
        chosen = choose(index, Difficulty(per_prompt=3, target=target, seed=target), passed_only=True)
        tasks = [c.task_id for c in chosen]
        assert len(chosen) == min(target, 9)  # three eligible prompts with a pass (never has none)
        counts = [tasks.count(t) for t in ("easy", "learnt", "hard")]
        assert max(counts) - min(counts) <= 1, tasks


def test_prompts_are_unique_across_runs(index: RunIndex) -> None:
    prompts = rl_prompts(index, Difficulty(min_pass=0.1, max_pass=0.9))
    assert sorted(p["task_id"] for p in prompts) == ["hard", "learnt"]
    assert {p["prompt"][-1]["content"] for p in prompts} == {"do hard", "do learnt"}
    assert all(p["prompt"][-1]["role"] == "user" for p in prompts)


def test_weighting_by_tool_calls_draws_the_busier_episodes_first(index: RunIndex) -> None:
    def mean_calls(by_tool_calls: bool) -> float:
        chosen = [
            c
            for seed in range(30)
            for c in choose(index, Difficulty(seed=seed, by_tool_calls=by_tool_calls), runs=["run-a"], passed_only=True)
            if c.task_id == "easy"
        ]
        return sum(c.tool_calls for c in chosen) / len(chosen)

    assert mean_calls(True) > mean_calls(False) + 2  # calls are 0, 5, 10, 15 by member


def test_sft_rows_carry_tool_calls_in_openais_nested_shape(index: RunIndex) -> None:
    rows, refused = sft_rows(index, Difficulty(per_prompt=1, seed=1), runs=["run-a"])
    assert refused == []
    calls = [call for row in rows for m in row["messages"] for call in m.get("tool_calls", [])]
    assert calls and all(c["type"] == "function" and isinstance(c["function"]["arguments"], str) for c in calls)
    assert calls[0]["function"]["name"] == "lookup"


def test_a_call_without_a_function_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="no function name"):
        openai_message({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]})


def test_corral_episodes_exports_the_prompts_by_difficulty(index: RunIndex, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from corral.cli.main import app

    out = tmp_path / "prompts.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "episodes",
            str(index.root),
            "--export",
            "prompts",
            "--out",
            str(out),
            "--min-pass",
            "0.1",
            "--max-pass",
            "0.9",
            "--max-step",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 1 prompts" in result.output
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == ["hard"]


def test_corral_episodes_help_names_every_export() -> None:
    from typer.testing import CliRunner

    from corral.cli.main import app

    result = CliRunner().invoke(app, ["episodes", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert all(f"{kind} (" in result.output for kind in ("sft", "rl", "prompts"))
