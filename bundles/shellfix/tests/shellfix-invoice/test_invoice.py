import unittest

from invoice import total


class TotalTest(unittest.TestCase):
    def test_no_discount(self):
        self.assertEqual(total([(2, 10.0), (1, 5.5)]), 25.5)

    def test_a_percentage_discount(self):
        self.assertEqual(total([(2, 10.0), (1, 5.5)], 10), 22.95)
        self.assertEqual(total([(4, 50.0)], 25), 150.0)
