import unittest

from intervals import merge


class MergeTest(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge([(5, 8), (1, 4), (2, 6)]), [(1, 8)])

    def test_touching_intervals_merge(self):
        self.assertEqual(merge([(1, 3), (3, 5)]), [(1, 5)])

    def test_apart(self):
        self.assertEqual(merge([(1, 2), (4, 5)]), [(1, 2), (4, 5)])
