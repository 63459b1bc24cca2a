import unittest

from ledger import parse_amount, total


class LedgerTest(unittest.TestCase):
    def test_plain_and_thousands(self):
        self.assertEqual(parse_amount("82.45"), 82.45)
        self.assertEqual(parse_amount("1,200.00"), 1200.0)

    def test_parentheses_are_negative(self):
        self.assertEqual(parse_amount("(35.10)"), -35.1)
        self.assertEqual(parse_amount(" (1,000) "), -1000.0)

    def test_total(self):
        lines = ["date,payee,amount", '2025-01-02,Rent,"1,200.00"',
                 "2025-01-05,Refund,(35.10)", "2025-01-09,Groceries,82.45"]
        self.assertEqual(total(lines), 1247.35)
