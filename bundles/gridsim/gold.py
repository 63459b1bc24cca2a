"""Gold answers for gridsim: the tool calls an agent that plays each day perfectly makes.

`python3 gold.py [SPLIT]` prints one JSON line per task of the split (default `train`):
`{"task_id": ..., "calls": [...]}`. A call is `{"name": ..., "arguments": {...}}`, in the
order the agent makes them: `submit_schedule` with the optimal actions (from
`verifiers/grade.py`'s exact optimum), then `end_turn`, as the system prompt asks. A
supervised warm start trains on these calls (`corral.training.sft.gold_dataset` plays them
against a live server, so the tool answers it trains on are the server's). Standard library
only, like the rest of the bundle's scripts.
"""

import importlib.util
import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
CLOSING_REPLY = "Submitted the schedule."


def _load(path: Path) -> ModuleType:
    """Import a bundle file by path: the verifier is not a package."""
    spec = importlib.util.spec_from_file_location(f"gridsim_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


grade = _load(HERE / "verifiers" / "grade.py")


def gold_calls(task: dict) -> list[dict]:
    """The calls that score 1.0 on `task` (a line of tasks.jsonl): the optimal schedule, then end_turn."""
    _, actions = grade.optimal_schedule(task["args"])
    return [
        {"name": "submit_schedule", "arguments": {"actions": actions}},
        {"name": "end_turn", "arguments": {"response": CLOSING_REPLY}},
    ]


def tasks(split: str) -> Iterator[dict]:
    """The tasks of a split (`train` or `eval`, as in evals/), in tasks.jsonl's order."""
    path = HERE / "evals" / f"{split}.toml"
    if not path.exists():
        splits = ", ".join(sorted(p.stem for p in (HERE / "evals").glob("*.toml")))
        raise ValueError(f"gridsim has no split {split!r}; its splits are: {splits}")
    wanted = set(tomllib.loads(path.read_text())["tasks"])
    with open(HERE / "tasks.jsonl") as f:
        yield from (task for task in map(json.loads, f) if task["id"] in wanted)


def main() -> None:
    split = sys.argv[1] if len(sys.argv) > 1 else "train"
    for task in tasks(split):
        print(json.dumps({"task_id": task["id"], "calls": gold_calls(task)}, separators=(",", ":")))


if __name__ == "__main__":
    main()
