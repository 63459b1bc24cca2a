"""The battery's physics: what a schedule does to the state of charge and the day's cash.

Pure and standard-library only, kept apart from env.py so the baseline and the tests can run
a schedule without the env SDK. Rules, per hour with price p (USD/MWh):

- an action a > 0 charges a MW for the hour: SoC rises by a MWh and costs p * a;
- an action a < 0 discharges d = -a MW: SoC falls by d MWh and earns p * d * efficiency
  (the whole round-trip loss is taken on the way out, so SoCs stay whole MWh);
- the first hour whose action exceeds the power rating, or would leave the SoC outside
  [0, capacity], truncates the schedule: that hour and the rest are idle;
- the day must end at or above `end_soc_mwh`.
A truncated schedule, or one ending below `end_soc_mwh`, is infeasible.

Money is counted in whole 1e-4 USD (prices have 2 decimals, efficiency 2 decimals), so the
env's profit and the verifier's optimum (verifiers/grade.py, which repeats `hour_value`'s rule
because verifiers never import env code) agree exactly, not merely to a float's last bit.
"""

UNITS_PER_USD = 10_000


def hour_value(price_cents: int, efficiency_pct: int, action: int) -> int:
    """Cash of one hour's action, in 1e-4 USD (negative when it costs)."""
    return -price_cents * action * (100 if action > 0 else efficiency_pct)


def simulate(args: dict, actions: list[int]) -> dict:
    """Run a whole-day schedule (one action per hour) through the rules above.

    Returns the tool's answer fields: feasible, truncated_at (the hour the schedule was cut,
    or None), violation (why, or None), soc_path (hours + 1 SoCs) and profit_usd.
    """
    battery = args["battery"]
    power, capacity = battery["power_mw"], battery["capacity_mwh"]
    cents = [round(p * 100) for p in args["prices_usd_per_mwh"]]
    efficiency = round(battery["efficiency"] * 100)
    soc, cash = battery["start_soc_mwh"], 0
    path, truncated_at, violation = [soc], None, None
    for hour, action in enumerate(actions):
        if truncated_at is None:
            violation = _violation(hour, action, soc, power, capacity)
            if violation is None:
                soc += action
                cash += hour_value(cents[hour], efficiency, action)
            else:
                truncated_at = hour
        path.append(soc)
    if violation is None and soc < battery["end_soc_mwh"]:
        violation = f"the day ends at {soc} MWh, below the required end_soc_mwh of {battery['end_soc_mwh']} MWh"
    return {
        "feasible": violation is None,
        "truncated_at": truncated_at,
        "violation": violation,
        "soc_path": path,
        "profit_usd": cash / UNITS_PER_USD,
    }


def _violation(hour: int, action: int, soc: int, power: int, capacity: int) -> str | None:
    if abs(action) > power:
        return f"hour {hour}: |{action}| MW exceeds the battery's power of {power} MW"
    if soc + action > capacity:
        return f"hour {hour}: charging {action} MWh from {soc} MWh would exceed the capacity of {capacity} MWh"
    if soc + action < 0:
        return f"hour {hour}: discharging {-action} MWh from {soc} MWh would go below 0 MWh"
    return None
