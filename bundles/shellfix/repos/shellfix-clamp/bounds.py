"""Keeping numbers within bounds."""


def clamp(value: float, low: float, high: float) -> float:
    """`value` if it lies in [low, high], else the nearer bound."""
    if low > high:
        raise ValueError(f"low {low} is above high {high}")
    return max(high, min(low, value))
