"""GridSim: the agent schedules one grid battery over one day of day-ahead prices.

The physics live in battery.py; this class keeps the day and the last valid-length
submission, which is what the verifier grades.
"""

from battery import simulate

from corral.env import Env, tool


class GridSim(Env):
    """One day: `reset` loads the task's prices and battery, `submit_schedule` may be called
    any number of times, and the last submission of the right length counts."""

    def reset(self, args: dict) -> None:
        self.args = args
        self.hours = len(args["prices_usd_per_mwh"])
        self.last: dict | None = None

    @tool
    def submit_schedule(self, actions: list[int]) -> dict:
        """Submit the day's schedule; the last submission of the right length counts.

        Args:
            actions: one integer per hour, hour 0 first, each between -power_mw and +power_mw:
                +a charges a MWh that hour (paying the price for each), -d discharges d MWh
                (earning the price times the round-trip efficiency for each), 0 idles.
        """
        if len(actions) != self.hours:
            return {"submitted": False, "error": f"expected exactly {self.hours} integers, got {len(actions)}"}
        result = simulate(self.args, actions)
        self.last = {"actions": list(actions), **result}
        return {"submitted": True, **result}

    def report(self) -> dict:
        """The last valid-length schedule and what it did, or `submitted: false`."""
        if self.last is None:
            return {"submitted": False}
        return {"submitted": True, **self.last}
