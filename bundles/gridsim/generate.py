"""Write gridsim's tasks.jsonl and evals/*.toml: run `python3 generate.py` in this folder.

Prices are SYNTHETIC (nothing can be downloaded where this bundle is built), shaped like
ERCOT hub day-ahead prices: a yearly level, seasons, a daily profile (night trough, morning
ramp, evening peak, hot summer afternoons, a midday solar dip from 2020 on), noise, rare
spikes of hundreds to a few thousand USD/MWh and rare negative hours. Every day is seeded
by its date, so re-running writes the same files byte for byte.
"""

import json
import math
import random
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).parent
TRAIN_DAYS, EVAL_DAYS = 2000, 200
# Rough yearly level (USD/MWh), loosely after ERCOT's gas-driven averages.
YEAR_LEVEL = {
    2014: 38,
    2015: 26,
    2016: 24,
    2017: 27,
    2018: 32,
    2019: 30,
    2020: 22,
    2021: 35,
    2022: 60,
    2023: 40,
    2024: 30,
    2025: 33,
}
MONTH_LEVEL = [1.05, 1.05, 0.95, 0.9, 0.95, 1.1, 1.3, 1.45, 1.2, 0.95, 0.95, 1.0]
SUMMER = {6: 0.6, 7: 1.0, 8: 1.0, 9: 0.6}  # weight of the hot-afternoon peak
WINTER = {12: 1.0, 1: 1.0, 2: 1.0, 11: 0.5, 3: 0.3}  # weight of the morning ramp


def day_prices(day: date) -> list[float]:
    """The day's 24 hourly prices (hour 0 = 00:00-01:00), in USD/MWh with 2 decimals."""
    rng = random.Random(f"gridsim-prices-{day.isoformat()}")
    summer, winter = SUMMER.get(day.month, 0.0), WINTER.get(day.month, 0.0)
    solar = min(0.35, 0.07 * max(0, day.year - 2019)) * (1.5 if day.month in (3, 4, 5) else 1)
    level = YEAR_LEVEL[day.year] * MONTH_LEVEL[day.month - 1] * math.exp(rng.gauss(0, 0.15))
    level *= 0.88 if day.weekday() >= 5 else 1.0
    prices = []
    for hour in range(24):
        shape = (
            0.75
            + (0.15 + 0.2 * winter) * _bump(hour, 7.5, 1.3)
            + 0.45 * _bump(hour, 19, 1.8)
            + 1.1 * summer * _bump(hour, 16.5, 2.2)
            + 0.2 * _bump(hour, 13, 4)
            - solar * _bump(hour, 12.5, 2.2)
        )
        prices.append(max(1.0, level * shape * math.exp(rng.gauss(0, 0.08))))
    if rng.random() < 0.015 + 0.06 * summer + 0.02 * winter:
        peak = rng.choice([7, 8, 18, 19, 20]) if summer == 0 else rng.randint(15, 19)
        spike = 200 * 15 ** rng.random()  # 200..3000, log-uniform
        for hour in range(peak - rng.randint(0, 1), peak + rng.randint(1, 2)):
            prices[hour] = max(prices[hour], spike * rng.uniform(0.4, 1.0))
    if rng.random() < 0.02 + (0.06 if day.month in (3, 4, 5, 10) else 0) + solar / 5:
        start = rng.choice([1, 2, 3, 4]) if rng.random() < 0.6 else rng.choice([11, 12, 13])
        for hour in range(start, start + rng.randint(1, 4)):
            prices[hour] = -rng.uniform(0.5, 25)
    return [round(p, 2) for p in prices]


def _bump(hour: int, centre: float, width: float) -> float:
    return math.exp(-0.5 * ((hour - centre) / width) ** 2)


def day_battery(day: date) -> dict:
    """The day's battery: 1-4 MW, 2-4 hours of storage, an idle day always feasible."""
    rng = random.Random(f"gridsim-battery-{day.isoformat()}")
    power = rng.choice([1, 2, 2, 3, 4])
    capacity = power * rng.choice([2, 2, 3, 4])
    start = rng.randint(0, capacity // 2)
    end = rng.choice([0, start, rng.randint(0, start)])  # end <= start: idling is allowed
    return {
        "capacity_mwh": capacity,
        "power_mw": power,
        "start_soc_mwh": start,
        "end_soc_mwh": end,
        "efficiency": rng.choice([0.85, 0.86, 0.88, 0.9, 0.92]),
    }


def prompt(day: date, prices: list[float], battery: dict) -> str:
    """The task's user message: the date, the prices by hour, the battery, how to answer."""
    table = "\n".join(f"{hour:>4}  {price:>9.2f}" for hour, price in enumerate(prices))
    b = battery
    return (
        f"Day-ahead prices for {day.isoformat()} (synthetic, USD/MWh):\n"
        f"hour      price\n{table}\n\n"
        f"Battery: capacity {b['capacity_mwh']} MWh, power {b['power_mw']} MW, "
        f"starts the day at {b['start_soc_mwh']} MWh, must end it at >= "
        f"{b['end_soc_mwh']} MWh, round-trip efficiency {b['efficiency']}.\n\n"
        f"Call submit_schedule with 24 integers, hour 0 first, each between "
        f"-{b['power_mw']} and {b['power_mw']}: +a charges a MWh, -d discharges d MWh, "
        f"0 idles. Then call end_turn."
    )


def task(day: date) -> dict:
    prices, battery = day_prices(day), day_battery(day)
    args = {"date": day.isoformat(), "prices_usd_per_mwh": prices, "battery": battery}
    return {"id": f"gridsim-{day.isoformat()}", "args": args, "prompt": prompt(day, prices, battery)}


def days(first: date, last: date, count: int, seed: str) -> list[date]:
    """`count` distinct days in [first, last], sampled by `seed`, in date order."""
    every = [first + timedelta(n) for n in range((last - first).days + 1)]
    return sorted(random.Random(seed).sample(every, count))


def split_days() -> dict[str, list[date]]:
    """The days of each split: `train` within 2014-2024, `eval` within 2025."""
    return {
        "train": days(date(2014, 1, 1), date(2024, 12, 31), TRAIN_DAYS, "gridsim-train"),
        "eval": days(date(2025, 1, 1), date(2025, 12, 31), EVAL_DAYS, "gridsim-eval"),
    }


def main() -> None:
    splits = split_days()
    tasks = [task(day) for day in splits["train"] + splits["eval"]]
    with open(HERE / "tasks.jsonl", "w") as f:
        f.writelines(json.dumps(t, separators=(",", ":")) + "\n" for t in tasks)
    for name, chosen in splits.items():
        ids = "".join(f'  "gridsim-{day.isoformat()}",\n' for day in chosen)
        (HERE / "evals" / f"{name}.toml").write_text(f"tasks = [\n{ids}]\n")


if __name__ == "__main__":
    main()
