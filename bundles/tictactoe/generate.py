"""Write tictactoe's tasks.jsonl and evals/*.toml: run `python3 generate.py` in this folder.

A task is a seed for O's random choices and O's strength: about a third of the games face a
purely random O, the rest a tactical one (win if it can, else block, else random), so the
agent meets both easy wins and games it must fight for a draw. Deterministic: re-running
writes the same files.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
GAMES, TRAIN = 300, 250
PROMPT = (
    "New game. You are X and move first.\n\n"
    "  1 2 3\n1 . . .\n2 . . .\n3 . . .\n\n"
    "Your move: call place(row, col), then end_turn."
)


def task(seed: int) -> dict:
    opponent = "random" if random.Random(f"tictactoe-{seed}").random() < 1 / 3 else "tactical"
    return {"id": f"tictactoe-{seed:03d}", "args": {"seed": seed, "opponent": opponent}, "prompt": PROMPT}


def main() -> None:
    tasks = [task(seed) for seed in range(GAMES)]
    with open(HERE / "tasks.jsonl", "w") as f:
        f.writelines(json.dumps(t, separators=(",", ":")) + "\n" for t in tasks)
    for split, chosen in (("train", tasks[:TRAIN]), ("eval", tasks[TRAIN:])):
        ids = "".join(f'  "{t["id"]}",\n' for t in chosen)
        (HERE / "evals" / f"{split}.toml").write_text(f"tasks = [\n{ids}]\n")


if __name__ == "__main__":
    main()
