"""Grade a day's schedule against the exact optimum, found by dynamic programming.

The env reports the profit of the last valid-length schedule (envs/gridsim/battery.py holds
the physics); this module recomputes the best profit the day allowed from the task's args
alone. It repeats the one-line hourly cash rule rather than import env code: verifiers run
in the server, env code in the sandbox. `optimal_schedule` is also the gold answer training
recipes use (load this file by path).

Score: 1.0 at the optimum, 0.2 for an idle day (profit 0), linear in the profit between them
and below (0 at a loss as large as the optimum); 0 without a feasible submission. When the
optimum is 0 (idle is best), any feasible schedule without a loss scores 1.0.
"""

UNITS_PER_USD = 10_000
IDLE_SCORE = 0.2


def optimal_schedule(args: dict) -> tuple[float, list[int]]:
    """The day's best profit in USD and one schedule that earns it.

    DP over hours x states of charge (0..capacity MWh) x actions (-power..+power MW). Among
    equally good actions the smallest move wins, so the gold schedule never cycles for
    nothing. Example: `profit, actions = optimal_schedule(task["args"])`.
    """
    battery = args["battery"]
    power, capacity = battery["power_mw"], battery["capacity_mwh"]
    cents = [round(p * 100) for p in args["prices_usd_per_mwh"]]
    efficiency = round(battery["efficiency"] * 100)
    moves = sorted(range(-power, power + 1), key=lambda a: (abs(a), a))
    # best[soc]: the most cash (1e-4 USD) the remaining hours can earn from soc; None: no way
    # to end at end_soc. choice[h][soc]: the action that earns it at hour h.
    best = [0 if soc >= battery["end_soc_mwh"] else None for soc in range(capacity + 1)]
    choice: list[list[int]] = []
    for price in reversed(cents):
        now: list[int | None] = [None] * (capacity + 1)
        acts = [0] * (capacity + 1)
        for soc in range(capacity + 1):
            for a in moves:
                after = soc + a
                if 0 <= after <= capacity and best[after] is not None:
                    value = best[after] - price * a * (100 if a > 0 else efficiency)
                    if now[soc] is None or value > now[soc]:
                        now[soc], acts[soc] = value, a
        best = now
        choice.insert(0, acts)
    soc, actions = battery["start_soc_mwh"], []
    for acts in choice:
        actions.append(acts[soc])
        soc += acts[soc]
    return best[battery["start_soc_mwh"]] / UNITS_PER_USD, actions


def score(profit: float, optimum: float) -> float:
    """Map a feasible schedule's profit to [0, 1]: 0.2 idle, 1.0 optimal, linear between."""
    if optimum <= 0:
        return 1.0 if profit >= 0 else 0.0
    if profit >= 0:
        value = IDLE_SCORE + (1 - IDLE_SCORE) * profit / optimum
    else:
        value = IDLE_SCORE * (1 + profit / optimum)
    return min(1.0, max(0.0, value))


def verify(task: dict, report: dict) -> float:
    """The reward: 0 without a feasible valid-length submission, else `score` vs the optimum."""
    if not report.get("submitted") or not report.get("feasible"):
        return 0.0
    optimum, _ = optimal_schedule(task["args"])
    return score(report["profit_usd"], optimum)
