"""What the shop has on its shelves."""


class OutOfStock(Exception):
    """More of an item was asked for than the shop has."""


class Stock:
    def __init__(self, counts: dict[str, int]):
        self.counts = dict(counts)

    def can_take(self, sku: str, quantity: int) -> bool:
        """Whether `quantity` of `sku` are on the shelves (all of them may be taken)."""
        return quantity < self.counts.get(sku, 0)

    def take(self, sku: str, quantity: int) -> None:
        if not self.can_take(sku, quantity):
            raise OutOfStock(f"only {self.counts.get(sku, 0)} of {sku} left")
        self.counts[sku] -= quantity
