"""Invoice totals."""


def total(lines: list[tuple[int, float]], discount_percent: float = 0) -> float:
    """The sum of quantity * unit price over `lines`, less `discount_percent` percent,
    rounded to cents."""
    subtotal = sum(quantity * price for quantity, price in lines)
    return round(subtotal - discount_percent, 2)
