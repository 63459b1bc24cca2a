"""A counter the agent steers to a target: one episode of the env is one task played."""

from corral.env import Env, tool


class Counter(Env):
    def reset(self, args: dict) -> None:
        """Start the episode from the task's "args"."""
        self.count = args["start"]
        self.calls = 0

    # A tool is a method with type hints and a Google-style docstring: the agent sees its
    # name, its description and its arguments' descriptions.
    @tool
    def add(self, amount: int) -> dict:
        """Add a whole number to the counter.

        Args:
            amount: the number to add; negative to subtract.
        """
        self.calls += 1
        self.count += amount
        return {"count": self.count}

    @tool
    def multiply(self, factor: int) -> dict:
        """Multiply the counter by a whole number.

        Args:
            factor: the number to multiply by.
        """
        self.calls += 1
        self.count *= factor
        return {"count": self.count}

    def report(self) -> dict:
        """What the verifier grades once the episode is over; never shown to the agent."""
        return {"count": self.count, "calls": self.calls}
