import unittest

from stats import mean, median


class MedianTest(unittest.TestCase):
    def test_odd_count(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_even_count_takes_the_mean_of_the_middle_two(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        self.assertEqual(median([10, 20]), 15)

    def test_one_value(self):
        self.assertEqual(median([7]), 7)

    def test_no_values(self):
        with self.assertRaises(ValueError):
            median([])

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)
