import unittest

from shop.cart import Cart
from shop.stock import OutOfStock, Stock


class CartTest(unittest.TestCase):
    def test_adding_takes_from_the_stock(self):
        stock = Stock({"apple": 5})
        Cart(stock).add("apple", 2)
        self.assertEqual(stock.counts["apple"], 3)

    def test_the_last_items_can_be_taken(self):
        stock = Stock({"apple": 2})
        cart = Cart(stock)
        cart.add("apple", 2)
        self.assertEqual(cart.items, {"apple": 2})
        self.assertEqual(stock.counts["apple"], 0)

    def test_more_than_the_stock_is_refused(self):
        with self.assertRaises(OutOfStock):
            Cart(Stock({"pear": 1})).add("pear", 2)
        with self.assertRaises(OutOfStock):
            Cart(Stock({})).add("fig")
