"""Write codeword's tasks.jsonl and evals/*.toml: run `python3 generate.py` in this folder.

Each task hides a table: every code word with a number from 10 to 99, drawn afresh per task,
and names one code word in its prompt. The same word means a different number in every task,
so the agent must look it up: nothing about a task's answer can be learnt by heart, and the
eval tasks are tasks the training never saw. Seeded, so re-running writes the same files.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
WORDS = [
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "heron",
    "ivory",
    "jade",
    "koala",
    "lemon",
    "maple",
    "noble",
    "olive",
    "pearl",
]
TRAIN_TASKS, EVAL_TASKS = 600, 64


def task(index: int, rng: random.Random) -> dict:
    word = rng.choice(WORDS)
    numbers = {w: rng.randint(10, 99) for w in WORDS}
    return {
        "id": f"codeword-{index:04d}",
        "args": {"word": word, "numbers": numbers},
        "prompt": f'Code word: "{word}".',
    }


def main() -> None:
    rng = random.Random("codeword")
    tasks = [task(i, rng) for i in range(TRAIN_TASKS + EVAL_TASKS)]
    with open(HERE / "tasks.jsonl", "w") as f:
        f.writelines(json.dumps(t, separators=(",", ":")) + "\n" for t in tasks)
    for split, chosen in (("train", tasks[:TRAIN_TASKS]), ("eval", tasks[TRAIN_TASKS:])):
        ids = ",\n".join(f'  "{t["id"]}"' for t in chosen)
        (HERE / "evals" / f"{split}.toml").write_text(f"tasks = [\n{ids},\n]\n")


if __name__ == "__main__":
    main()
