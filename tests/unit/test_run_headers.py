"""Runs that say what they are: a header beside the records (kind, model, bundle, split, start, end,
settings), folders written before headers still listed, and evals of a training run's checkpoints
joined to it at their step."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from corral.cli.viewer.pages import run_page, runs_page
from corral.client import run_views
from corral.client.run_headers import METRICS, end_header, write_header
from corral.client.run_index import EpisodeFilter, RunIndex
from corral.protocol.record_store import RecordWriter
from corral.protocol.records import RolloutRecord, RunHeader
from corral.training.run_context import trainer_header


def _played(root: Path, run: str, rewards: dict[int, list[float]]) -> None:
    writer = RecordWriter(root, "rollouts", run=run)
    for step, values in rewards.items():
        for n, reward in enumerate(values):
            writer.write(
                RolloutRecord(episode_id=f"{run}-{step}-{n}", task_id="add", reward=reward, step=step, group=0)
            )
    writer.close()


def test_a_run_without_a_header_is_listed_unlabelled(tmp_path: Path) -> None:
    _played(tmp_path, "old", {0: [1.0]})
    index = RunIndex(tmp_path)
    assert [(r.run, r.header) for r in run_views.runs(index)] == [("old", None)]
    assert "<td class='kind'>-</td>" in runs_page(index)
    assert "run-header" not in run_page(index, "old", EpisodeFilter(run="old"))


def test_the_run_list_shows_what_each_run_is(tmp_path: Path) -> None:
    _played(tmp_path, "grpo", {0: [1.0]})
    header = RunHeader(run="grpo", kind="training", model="Qwen/Qwen3-0.6B", bundle="arith", split="train")
    write_header(tmp_path, header)
    ended = end_header(tmp_path, header)
    index = RunIndex(tmp_path)
    (row,) = run_views.runs(index)
    assert row.header == ended and ended.ended_at is not None
    page = runs_page(index)
    assert "<td class='kind'>training</td><td>Qwen/Qwen3-0.6B</td><td>arith</td><td>train</td>" in page


def test_evals_of_a_checkpoint_join_the_training_run_at_its_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _played(tmp_path, "grpo", {0: [0.0, 1.0], 1: [1.0, 1.0], 2: [0.0, 0.0]})
    write_header(tmp_path, RunHeader(run="grpo", kind="training", settings={"output_dir": str(out)}))
    for run, model, step, rewards in [
        ("eval-a", out / "checkpoint-1", 1, [0.0, 0.5]),
        ("eval-b", out / "checkpoint-1", 1, [1.0, 1.0]),  # two evals at one step: their mean
        ("eval-c", out / "checkpoint-2", 2, [0.5]),
        ("other", tmp_path / "elsewhere" / "checkpoint-2", 2, [1.0]),  # another run's checkpoint
        ("base", Path("Qwen/Qwen3-0.6B"), None, [1.0]),  # not a checkpoint: no step
    ]:
        _played(tmp_path, run, {0: rewards})
        write_header(tmp_path, RunHeader(run=run, kind="eval", model=str(model), step=step))
    index = RunIndex(tmp_path)
    assert run_views.eval_rewards(index, "grpo") == {1: 0.625, 2: 0.5}
    assert run_views.eval_rewards(index, "eval-a") == {}  # an eval is no training run
    page = run_page(index, "grpo", EpisodeFilter(run="grpo"))
    assert "eval mean reward" in page and "<td class='kind'>training</td>" in page
    assert f"<td>output_dir</td><td>{out}</td>" in page  # the settings, folded


def test_a_trainer_header_keeps_the_model_and_key_settings() -> None:
    args = SimpleNamespace(output_dir="out", learning_rate=1e-6, num_generations=8, logging_dir="x")
    trainer = SimpleNamespace(args=args, model=SimpleNamespace(config=SimpleNamespace(_name_or_path="tiny")))
    header = trainer_header(trainer, "run", "arith", "train")
    assert (header.kind, header.model, header.bundle, header.split) == ("training", "tiny", "arith", "train")
    assert header.settings == {"output_dir": "out", "learning_rate": 1e-6, "num_generations": 8}


def test_the_trainers_metrics_are_read_by_step_and_plotted(tmp_path: Path) -> None:
    _played(tmp_path, "grpo", {1: [1.0], 2: [0.0]})
    (tmp_path / "grpo" / METRICS).write_text(
        '{"step": 1, "loss": 0.5, "kl": 0.01}\n{"step": 2, "loss": 0.25}\n{"step": 2, "loss": 0.2}\n{"step": 3, "lo'
    )
    index = RunIndex(tmp_path)
    assert index.metrics("grpo") == {
        "loss": {1: 0.5, 2: 0.2},
        "kl": {1: 0.01},
    }  # the last at a step; a cut line skipped
    page = run_page(index, "grpo", EpisodeFilter(run="grpo"))
    assert "<div id='trainer'>" in page and ">loss</text>" in page and ">kl</text>" in page
