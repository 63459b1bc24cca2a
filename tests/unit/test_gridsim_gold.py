"""gridsim's gold.py: the calls a perfect agent makes, which a supervised warm start trains on."""

import json
import subprocess
import sys
import tomllib

import pytest

from tests.unit.test_gridsim import BUNDLE, battery, grade, load

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


def test_tasks_of_a_split_are_the_ones_its_eval_file_lists_in_file_order() -> None:
    listed = tomllib.loads((BUNDLE / "evals" / "eval.toml").read_text())["tasks"]

    assert [task["id"] for task in gold.tasks("eval")] == sorted(listed)
    assert len(TRAIN) == 2000


def test_an_unknown_split_names_the_splits_there_are() -> None:
    with pytest.raises(ValueError, match="gridsim has no split 'test'; its splits are: eval, train"):
        list(gold.tasks("test"))


def test_the_script_prints_one_json_line_per_task_of_the_split() -> None:
    out = subprocess.run([sys.executable, str(BUNDLE / "gold.py"), "eval"], capture_output=True, text=True,
                         check=True).stdout.splitlines()

    assert len(out) == 200
    first = json.loads(out[0])
    task = next(gold.tasks("eval"))
    assert first == {"task_id": task["id"], "calls": gold.gold_calls(task)}
