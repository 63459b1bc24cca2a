import unittest

from search import find


class FindTest(unittest.TestCase):
    def test_every_item_is_found(self):
        items = [1, 3, 5, 7, 9, 11]
        for index, item in enumerate(items):
            self.assertEqual(find(items, item), index)

    def test_a_one_item_list(self):
        self.assertEqual(find([4], 4), 0)

    def test_missing_items(self):
        self.assertEqual(find([1, 3, 5], 4), -1)
        self.assertEqual(find([1, 3, 5], 9), -1)
        self.assertEqual(find([], 1), -1)
