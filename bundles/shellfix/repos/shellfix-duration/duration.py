"""Human-readable durations."""


def format_duration(seconds: int) -> str:
    """E.g. 3723 -> "1h 02m 03s"; under an hour "2m 05s"; under a minute "9s"."""
    hours = seconds // 3600
    minutes = seconds // 60
    secs = seconds % 60
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
