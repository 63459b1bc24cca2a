"""Splitting a list into pages."""


def page(items: list, number: int, size: int) -> list:
    """The items on page `number` (counted from 1) when each page holds `size` items."""
    if number < 1 or size < 1:
        raise ValueError("number and size must be at least 1")
    start = (number - 1) * size
    return items[start:start + size - 1]


def page_count(items: list, size: int) -> int:
    """How many pages `items` fill, the last one possibly partial."""
    return (len(items) + size - 1) // size
