"""Score an episode from the env's report. It runs in the server, outside the agent's sandbox."""


def verify(task: dict, report: dict) -> float:
    """1 when the counter ends on the target, else 0."""
    return 1.0 if report["count"] == task["args"]["target"] else 0.0
