"""A customer's cart, taking items from the stock as they are added."""

from shop.stock import Stock


class Cart:
    def __init__(self, stock: Stock):
        self.stock = stock
        self.items: dict[str, int] = {}

    def add(self, sku: str, quantity: int = 1) -> None:
        self.stock.take(sku, quantity)
        self.items[sku] = self.items.get(sku, 0) + quantity
