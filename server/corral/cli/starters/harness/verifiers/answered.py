"""Score an episode from the env's report. It runs in the server, outside the agent's sandbox."""


def verify(task: dict, report: dict) -> float:
    """1 when answer.txt holds the task's word (and nothing else), else 0."""
    return 1.0 if (report["answer"] or "").strip() == task["args"]["word"] else 0.0
