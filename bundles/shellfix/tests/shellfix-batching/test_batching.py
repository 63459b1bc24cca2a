import unittest

from batching import chunks


class ChunksTest(unittest.TestCase):
    def test_even_split(self):
        self.assertEqual(chunks([1, 2, 3, 4], 2), [[1, 2], [3, 4]])

    def test_the_last_batch_may_be_short(self):
        self.assertEqual(chunks([1, 2, 3, 4, 5, 6, 7], 3), [[1, 2, 3], [4, 5, 6], [7]])
        self.assertEqual(chunks([1, 2], 5), [[1, 2]])

    def test_nothing(self):
        self.assertEqual(chunks([], 3), [])
