"""Score a finished game from the env's report: 1 win, 0.5 draw, 0 loss, illegal or unfinished."""

SCORES = {"win": 1.0, "draw": 0.5}


def verify(task: dict, report: dict) -> float:
    """The reward for the game's outcome."""
    return SCORES.get(report.get("outcome"), 0.0)
