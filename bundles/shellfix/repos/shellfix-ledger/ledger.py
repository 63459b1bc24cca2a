"""Totals of a ledger exported as CSV: `python3 ledger.py FILE` prints the amount column's sum."""

import csv
import sys


def parse_amount(text: str) -> float:
    """"1,234.50" -> 1234.5; accounting negatives in parentheses: "(12.50)" -> -12.5."""
    cleaned = text.strip().replace(",", "")
    return float(cleaned)


def total(lines: list[str]) -> float:
    """The sum of the `amount` column; the first line is the header."""
    rows = csv.reader(lines)
    column = next(rows).index("amount")
    return round(sum(parse_amount(row[column]) for row in rows if row), 2)


if __name__ == "__main__":
    with open(sys.argv[1], newline="") as ledger:
        print(f"{total(ledger.read().splitlines()):.2f}")
