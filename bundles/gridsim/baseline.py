"""A greedy baseline for gridsim: `python3 baseline.py` prints its mean score on the eval split.

The rule: list every one-MWh trade worth making (charge in hour i, discharge in a later hour j
when price_j x efficiency beats price_i; sell stored surplus in a dear hour; charge alone in a
negative hour), best first, and make each as often as the battery's limits allow. It ignores
how trades crowd each other out, which is where the exact optimum wins.
"""

import importlib.util
import json
import tomllib
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent


def _load(path: Path) -> ModuleType:
    """Import a bundle file by path: the env's physics and the verifier are not packages."""
    spec = importlib.util.spec_from_file_location(f"gridsim_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


battery_physics = _load(HERE / "envs" / "gridsim" / "battery.py")
grade = _load(HERE / "verifiers" / "grade.py")


def greedy_schedule(args: dict) -> list[int]:
    """The greedy rule's schedule for one task's args: one integer per hour."""
    prices, battery = args["prices_usd_per_mwh"], args["battery"]
    efficiency, hours = battery["efficiency"], len(prices)
    trades = []  # (gain in USD, hour charged or None, hour discharged or None)
    for j in range(hours):
        trades.append((prices[j] * efficiency, None, j))
        trades.append((-prices[j], j, None))
        trades.extend((prices[j] * efficiency - prices[i], i, j) for i in range(j))
    actions = [0] * hours
    for gain, charge, discharge in sorted(trades, key=lambda t: -t[0]):
        if gain <= 0:
            break
        while True:
            trial = list(actions)
            if charge is not None:
                trial[charge] += 1
            if discharge is not None:
                trial[discharge] -= 1
            if not battery_physics.simulate(args, trial)["feasible"]:
                break
            actions = trial
    return actions


def main() -> None:
    eval_ids = set(tomllib.loads((HERE / "evals" / "eval.toml").read_text())["tasks"])
    with open(HERE / "tasks.jsonl") as f:
        tasks = [t for t in map(json.loads, f) if t["id"] in eval_ids]
    scores = []
    for task in tasks:
        actions = greedy_schedule(task["args"])
        report = {"submitted": True, "actions": actions, **battery_physics.simulate(task["args"], actions)}
        scores.append(grade.verify(task, report))
    print(f"greedy baseline: mean score {sum(scores) / len(scores):.4f} over {len(scores)} eval days")


if __name__ == "__main__":
    main()
