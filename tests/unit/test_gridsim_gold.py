"""gridsim's gold.py: the calls a perfect agent makes, which a supervised warm start trains on."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.unit.test_gridsim import BUNDLE, TASKS, battery, grade, load

gold = load("gridsim_gold", BUNDLE / "gold.py")
TRAIN = list(gold.tasks("train"))


@pytest.mark.parametrize("task", TRAIN[:3] + TRAIN[-2:], ids=lambda task: task["id"])
def test_gold_calls_submit_the_optimal_schedule_then_end_the_turn(task: dict) -> None:
    submit, end = gold.gold_calls(task)

    optimum, actions = grade.optimal_schedule(task["args"])
    assert submit == {"name": "submit_schedule", "arguments": {"actions": actions}}
    assert end["name"] == "end_turn" and end["arguments"]["response"]
    played = battery.simulate(task["args"], submit["arguments"]["actions"])
    assert played["feasible"] and played["profit_usd"] == pytest.approx(optimum)
    assert grade.verify(task, {"submitted": True, **played}) == 1.0


def test_tasks_of_a_split_are_the_ones_its_eval_file_lists_in_tasks_jsonl_order(tmp_path: Path) -> None:
    listed = tomllib.loads((BUNDLE / "evals" / "eval.toml").read_text())["tasks"]
    assert [task["id"] for task in gold.tasks("eval")] == [task["id"] for task in TASKS if task["id"] in listed]
    assert len(TRAIN) == 2000

    # gridsim's files are sorted by date: on a copy of gold.py whose tasks.jsonl holds four days
    # out of date order, and whose eval file lists three of them in yet another order, the
    # split follows tasks.jsonl.
    shutil.copy(BUNDLE / "gold.py", tmp_path / "gold.py")
    shutil.copytree(BUNDLE / "verifiers", tmp_path / "verifiers")
    stored = [TASKS[5], TASKS[1], TASKS[9], TASKS[3]]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in stored))
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "eval.toml").write_text(f"tasks = {json.dumps([TASKS[i]['id'] for i in (9, 3, 5)])}\n")
    copy = load("gridsim_gold_copy", tmp_path / "gold.py")

    assert [task["id"] for task in copy.tasks("eval")] == [TASKS[i]["id"] for i in (5, 9, 3)]


def test_an_unknown_split_names_the_splits_there_are() -> None:
    with pytest.raises(ValueError, match="gridsim has no split 'test'; its splits are: eval, train"):
        list(gold.tasks("test"))


def test_the_script_prints_one_json_line_per_task_of_the_split() -> None:
    out = subprocess.run(
        [sys.executable, str(BUNDLE / "gold.py"), "eval"], capture_output=True, text=True, check=True
    ).stdout.splitlines()

    assert len(out) == 200
    first = json.loads(out[0])
    task = next(gold.tasks("eval"))
    assert first == {"task_id": task["id"], "calls": gold.gold_calls(task)}
