"""The gridsim bundle: the battery's physics, the exact optimum, the grade, the generated days."""

import importlib.util
import itertools
import json
import random
import statistics
import sys
import tomllib
from datetime import date
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]
BUNDLE = ROOT / "bundles" / "gridsim"
ENV_DIR = BUNDLE / "envs" / "gridsim"
sys.path.insert(0, str(ROOT / "sandboxes"))


def load(name: str, path: Path) -> ModuleType:
    """Import a bundle file by path, with its folder importable as the env process has it."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


battery = load("gridsim_battery", ENV_DIR / "battery.py")
env_module = load("gridsim_env", ENV_DIR / "env.py")
grade = load("gridsim_grade", BUNDLE / "verifiers" / "grade.py")
generate = load("gridsim_generate", BUNDLE / "generate.py")
baseline = load("gridsim_baseline", BUNDLE / "baseline.py")
TASKS = [json.loads(line) for line in (BUNDLE / "tasks.jsonl").read_text().splitlines()]
BY_ID = {task["id"]: task for task in TASKS}


def split(name: str) -> list[str]:
    return tomllib.loads((BUNDLE / "evals" / f"{name}.toml").read_text())["tasks"]


def small_day(seed: int) -> dict:
    """A random short day, small enough to enumerate every schedule."""
    rng = random.Random(seed)
    power, capacity = rng.randint(1, 2), rng.randint(2, 3)
    start = rng.randint(0, capacity)
    return {
        "prices_usd_per_mwh": [round(rng.uniform(-40, 400), 2) for _ in range(rng.randint(4, 6))],
        "battery": {
            "capacity_mwh": capacity,
            "power_mw": power,
            "start_soc_mwh": start,
            "end_soc_mwh": rng.randint(0, start),
            "efficiency": rng.choice([0.85, 0.86, 0.88, 0.9, 0.92]),
        },
    }


def day(prices: list[float], capacity: int = 4, power: int = 2, start: int = 1, end: int = 1) -> dict:
    return {
        "prices_usd_per_mwh": prices,
        "battery": {
            "capacity_mwh": capacity,
            "power_mw": power,
            "start_soc_mwh": start,
            "end_soc_mwh": end,
            "efficiency": 0.9,
        },
    }


def played(task: dict, *submissions: list[int]) -> tuple[list[dict], dict]:
    """Reset the env on `task`, submit each schedule, and return the answers and the report."""
    env = env_module.GridSim()
    env.reset(task["args"])
    answers = [env.submit_schedule(actions) for actions in submissions]
    return answers, env.report()


@pytest.mark.parametrize("seed", range(60))
def test_the_optimum_equals_the_best_of_every_schedule(seed: int) -> None:
    args = small_day(seed)
    power, hours = args["battery"]["power_mw"], len(args["prices_usd_per_mwh"])
    every = (
        battery.simulate(args, list(actions)) for actions in itertools.product(range(-power, power + 1), repeat=hours)
    )
    best = max(result["profit_usd"] for result in every if result["feasible"])
    profit, actions = grade.optimal_schedule(args)
    assert profit == best
    result = battery.simulate(args, actions)
    assert result["feasible"] and result["profit_usd"] == best


def test_every_generated_day_has_a_feasible_optimum_the_env_agrees_with() -> None:
    for task in TASKS[::20]:
        profit, actions = grade.optimal_schedule(task["args"])
        result = battery.simulate(task["args"], actions)
        assert result["feasible"] and result["profit_usd"] == profit > 0


def test_an_idle_day_scores_0_2_and_the_optimum_scores_1() -> None:
    task = BY_ID[split("eval")[0]]
    _, idle = played(task, [0] * 24)
    _, best = played(task, grade.optimal_schedule(task["args"])[1])
    assert grade.verify(task, idle) == pytest.approx(0.2)
    assert grade.verify(task, best) == 1.0


def test_the_score_is_linear_in_profit_between_loss_idle_and_optimum() -> None:
    assert grade.score(50.0, 100.0) == pytest.approx(0.6)
    assert grade.score(-50.0, 100.0) == pytest.approx(0.1)
    assert grade.score(-300.0, 100.0) == 0.0
    assert grade.score(0.0, 0.0) == 1.0


def test_a_day_where_idling_is_best_scores_idling_1() -> None:
    task = {"args": day([30.0] * 24)}  # no spread beats the efficiency loss
    _, report = played(task, [0] * 24)
    assert grade.optimal_schedule(task["args"]) == (0.0, [0] * 24)
    assert grade.verify(task, report) == 1.0


def test_a_wrong_length_answer_says_how_many_and_is_not_counted() -> None:
    task = BY_ID[split("eval")[0]]
    answers, report = played(task, [0] * 24, [1] * 23)
    assert json.dumps(answers[1], separators=(",", ":")) == (
        '{"submitted":false,"error":"expected exactly 24 integers, got 23"}'
    )
    assert report["actions"] == [0] * 24
    assert grade.verify(task, report) == pytest.approx(0.2)


def test_no_valid_submission_scores_0() -> None:
    task = BY_ID[split("eval")[0]]
    _, report = played(task, [0] * 25)
    assert report == {"submitted": False}
    assert grade.verify(task, report) == 0.0


def test_the_last_valid_submission_counts() -> None:
    task = BY_ID[split("eval")[0]]
    _, report = played(task, grade.optimal_schedule(task["args"])[1], [0] * 24)
    assert grade.verify(task, report) == pytest.approx(0.2)


def test_charging_and_discharging_cost_and_earn_by_the_rules() -> None:
    result = battery.simulate(day([-10.0, 20.0, 50.0, 100.0]), [2, 1, -2, -1])
    assert result == {
        "feasible": True,
        "truncated_at": None,
        "violation": None,
        "soc_path": [1, 3, 4, 2, 1],
        "profit_usd": 180.0,
    }  # +20 paid to charge at -10, -20, +90, +90


@pytest.mark.parametrize(
    ("actions", "hour", "violation"),
    [
        ([1, 3, 0, 0], 1, "hour 1: |3| MW exceeds the battery's power of 2 MW"),
        ([2, 2, 0, 0], 1, "hour 1: charging 2 MWh from 3 MWh would exceed the capacity of 4 MWh"),
        ([-1, -1, 0, 0], 1, "hour 1: discharging 1 MWh from 0 MWh would go below 0 MWh"),
    ],
)
def test_a_breaking_hour_truncates_the_schedule(actions: list[int], hour: int, violation: str) -> None:
    result = battery.simulate(day([10.0, 20.0, 30.0, 40.0]), actions)
    assert result["truncated_at"] == hour and result["violation"] == violation
    assert not result["feasible"]
    soc = result["soc_path"][hour]
    assert result["soc_path"][hour:] == [soc] * (4 - hour + 1)  # that hour and the rest idle


def test_ending_below_the_required_soc_is_infeasible_and_scores_0() -> None:
    args = day([10.0, 20.0, 30.0, 40.0], start=2, end=2)
    result = battery.simulate(args, [0, 0, 0, -2])
    assert result["truncated_at"] is None and not result["feasible"]
    assert result["violation"] == "the day ends at 0 MWh, below the required end_soc_mwh of 2 MWh"
    assert grade.verify({"args": args}, {"submitted": True, **result}) == 0.0


def test_the_env_offers_one_tool_with_an_integer_list() -> None:
    [schema] = env_module.GridSim.tool_schemas()
    assert schema["name"] == "submit_schedule"
    assert schema["inputSchema"]["properties"]["actions"]["type"] == "array"
    assert schema["inputSchema"]["properties"]["actions"]["items"] == {"type": "integer"}


def test_prices_are_the_same_for_the_same_date() -> None:
    assert generate.day_prices(date(2021, 2, 15)) == generate.day_prices(date(2021, 2, 15))
    assert generate.day_prices(date(2021, 2, 15)) != generate.day_prices(date(2021, 2, 16))


def test_the_committed_tasks_and_splits_are_what_generate_writes() -> None:
    splits = generate.split_days()
    for name, chosen in splits.items():
        assert split(name) == [f"gridsim-{day.isoformat()}" for day in chosen]
    lines = (BUNDLE / "tasks.jsonl").read_text().splitlines()
    assert lines == [json.dumps(generate.task(day), separators=(",", ":")) for day in splits["train"] + splits["eval"]]


def test_splits_are_2000_train_days_to_2024_and_200_eval_days_in_2025() -> None:
    train, held_out = split("train"), split("eval")
    assert len(set(train)) == 2000 and len(set(held_out)) == 200
    assert set(train) | set(held_out) == set(BY_ID) and len(TASKS) == 2200
    assert all("2014" <= BY_ID[i]["args"]["date"][:4] <= "2024" for i in train)
    assert all(BY_ID[i]["args"]["date"][:4] == "2025" for i in held_out)


def test_prices_look_like_a_market_with_spikes_negatives_and_an_evening_peak() -> None:
    days = [task["args"]["prices_usd_per_mwh"] for task in TASKS]
    assert all(len(prices) == 24 for prices in days)
    assert sum(max(prices) > 300 for prices in days) >= 20
    assert max(max(prices) for prices in days) > 1000
    assert sum(min(prices) < 0 for prices in days) >= 20
    evening = statistics.mean(p for prices in days for p in prices[18:21])
    night = statistics.mean(p for prices in days for p in prices[2:5])
    assert evening > 1.5 * night


def test_batteries_vary_and_an_idle_day_is_always_feasible() -> None:
    batteries = [task["args"]["battery"] for task in TASKS]
    assert len({(b["capacity_mwh"], b["power_mw"]) for b in batteries}) > 5
    assert all(0 <= b["end_soc_mwh"] <= b["start_soc_mwh"] <= b["capacity_mwh"] for b in batteries)
    assert all(0.85 <= b["efficiency"] <= 0.92 for b in batteries)


def test_the_greedy_baseline_is_feasible_and_between_idle_and_optimal() -> None:
    for task_id in split("eval")[:40]:
        task = BY_ID[task_id]
        actions = baseline.greedy_schedule(task["args"])
        _, report = played(task, actions)
        assert report["feasible"]
        assert 0.2 <= grade.verify(task, report) <= 1.0
