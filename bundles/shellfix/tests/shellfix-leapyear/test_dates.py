import unittest

from dates import days_in_year, is_leap


class LeapTest(unittest.TestCase):
    def test_every_fourth_year(self):
        self.assertTrue(is_leap(2024))
        self.assertFalse(is_leap(2023))

    def test_centuries_are_not(self):
        self.assertFalse(is_leap(1900))
        self.assertFalse(is_leap(2100))

    def test_every_fourth_century_is(self):
        self.assertTrue(is_leap(2000))
        self.assertTrue(is_leap(1600))
        self.assertEqual(days_in_year(2000), 366)
