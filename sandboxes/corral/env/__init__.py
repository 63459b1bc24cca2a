"""corral's env SDK: subclass `Env`, mark the agent's tools with `@tool`, and corral serves it.

Standard library only, so any image with `python3` can run an env:

    from corral.env import Env, tool

    class GridSim(Env):
        def reset(self, args: dict) -> None: ...
        @tool
        def submit_schedule(self, actions: list[int]) -> dict:
            '''Submit the day's schedule.

            Args:
                actions: one integer per hour: +1 charge, -1 discharge, 0 idle.
            '''
        def report(self) -> dict: ...
"""

from corral.env.env import Env, tool
from corral.env.schema import ToolSchemaError

__all__ = ["Env", "ToolSchemaError", "tool"]
