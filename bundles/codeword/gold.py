"""Gold answers for codeword: `lookup` of the task's code word, then `submit` of its number.

`python3 gold.py [SPLIT]` prints one JSON line per task of the split (default `train`):
`{"task_id": ..., "calls": [...]}`. `corral.training.sft.load_gold_calls` reads `tasks` and
`gold_calls` from this file. Standard library only, like the rest of the bundle's scripts.
"""

import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).parent


def gold_calls(task: dict) -> list[dict]:
    """The calls that score 1.0 on `task` (a line of tasks.jsonl)."""
    word = task["args"]["word"]
    return [
        {"name": "lookup", "arguments": {"word": word}},
        {"name": "submit", "arguments": {"number": task["args"]["numbers"][word]}},
    ]


def tasks(split: str) -> Iterator[dict]:
    """The tasks of a split (`train` or `eval`), in tasks.jsonl's order."""
    path = HERE / "evals" / f"{split}.toml"
    if not path.exists():
        raise ValueError(f"codeword has no split {split!r}; its splits are: train, eval")
    wanted = set(tomllib.loads(path.read_text())["tasks"])
    with open(HERE / "tasks.jsonl") as f:
        yield from (task for task in map(json.loads, f) if task["id"] in wanted)


if __name__ == "__main__":
    for task in tasks(sys.argv[1] if len(sys.argv) > 1 else "train"):
        print(json.dumps({"task_id": task["id"], "calls": gold_calls(task)}))
