import unittest

from duration import format_duration


class FormatTest(unittest.TestCase):
    def test_seconds(self):
        self.assertEqual(format_duration(9), "9s")

    def test_minutes(self):
        self.assertEqual(format_duration(125), "2m 05s")

    def test_hours(self):
        self.assertEqual(format_duration(3723), "1h 02m 03s")
        self.assertEqual(format_duration(7200), "2h 00m 00s")
