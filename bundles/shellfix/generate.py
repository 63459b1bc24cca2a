"""Write shellfix's tasks.jsonl and evals/*.toml: run `python3 generate.py` in this folder.

Each task is a repository under `repos/<id>/` (what the agent gets, with its bug), the bug
report below (the prompt), its hidden tests under `tests/<id>/` and the reference fix in
`solutions/<id>.json`. This script packs the repositories and reports into tasks; the tests
and fixes stay where they are. Deterministic: re-running writes the same files.
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
EVAL = ["shellfix-ledger", "shellfix-shopcart", "shellfix-duration", "shellfix-intervals"]
REPORTS = {
    "shellfix-paginate": "page(items, number, size) in paginate.py leaves out the last item of "
    "every page: page(list(range(10)), 1, 3) gives [0, 1] instead of [0, 1, 2].",
    "shellfix-units": "c_to_f in units.py gives wrong answers: c_to_f(100) should be 212 (water "
    "boils), but it is about 87.6.",
    "shellfix-leapyear": "is_leap(2000) in dates.py says False, but 2000 was a leap year (years "
    "divisible by 400 are leap years even though they are centuries).",
    "shellfix-wordcount": 'count_words in words.py should ignore case, but count_words("The the") '
    'gives {"The": 1, "the": 1} instead of {"the": 2}.',
    "shellfix-median": "median([4, 1, 3, 2]) in stats.py returns 3, but the median of an even "
    "number of values is the mean of the two middle ones: 2.5.",
    "shellfix-roman": 'from_roman("III") in roman.py returns -1 instead of 3, and "MMXXIII" '
    "comes out wrong too; IV and IX seem fine.",
    "shellfix-binsearch": "find([1, 3, 5], 5) in search.py returns -1 although 5 is in the "
    "list; some other items are not found either.",
    "shellfix-fizzbuzz": 'say(15) in fizzbuzz.py returns "Fizz"; multiples of both 3 and 5 should give "FizzBuzz".',
    "shellfix-slugify": 'slugify("Hello, World!") in slug.py gives "hello-world-": slugs must '
    "not start or end with a dash.",
    "shellfix-invoice": "total(lines, discount_percent=10) in invoice.py takes 10 currency units "
    "off instead of 10 percent: 25.50 with a 10% discount should be 22.95, not 15.5.",
    "shellfix-batching": "chunks([1, 2, 3, 4, 5, 6, 7], 3) in batching.py drops the 7: the last, "
    "shorter batch is missing.",
    "shellfix-clamp": "clamp(5, 0, 10) in bounds.py returns 10 instead of 5, and clamp(-3, 0, 10) "
    "returns 10 instead of 0.",
    "shellfix-ledger": "python3 ledger.py sample.csv crashes with ValueError: amounts in "
    "parentheses like (35.10) are negative in accounting and must be read as -35.10.",
    "shellfix-shopcart": "A customer cannot buy the last items in stock: with 2 apples on the "
    'shelves, Cart(stock).add("apple", 2) raises OutOfStock (package shop/).',
    "shellfix-duration": 'format_duration(3723) in duration.py gives "1h 62m 03s" instead of "1h 02m 03s".',
    "shellfix-intervals": "merge([(1, 3), (3, 5)]) in intervals.py returns both intervals, but "
    "intervals that touch must merge into (1, 5).",
}


def task(task_id: str) -> dict:
    repo = HERE / "repos" / task_id
    files = {
        path.relative_to(repo).as_posix(): path.read_text()
        for path in sorted(repo.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    prompt = (
        f"Bug report: {REPORTS[task_id]}\n\nThe repository is in your working directory. "
        "Fix the bug, check your fix, then call end_turn."
    )
    return {"id": task_id, "args": {"files": files}, "prompt": prompt}


def main() -> None:
    tasks = [task(task_id) for task_id in sorted(REPORTS)]
    with open(HERE / "tasks.jsonl", "w") as f:
        f.writelines(json.dumps(t, separators=(",", ":")) + "\n" for t in tasks)
    train = [t["id"] for t in tasks if t["id"] not in EVAL]
    for split, ids in (("train", train), ("eval", EVAL)):
        lines = "".join(f'  "{task_id}",\n' for task_id in ids)
        (HERE / "evals" / f"{split}.toml").write_text(f"tasks = [\n{lines}]\n")


if __name__ == "__main__":
    main()
