import unittest

from paginate import page, page_count


class PageTest(unittest.TestCase):
    def test_first_page_is_full(self):
        self.assertEqual(page(list(range(10)), 1, 3), [0, 1, 2])

    def test_middle_page(self):
        self.assertEqual(page(list(range(10)), 2, 4), [4, 5, 6, 7])

    def test_last_page_is_partial(self):
        self.assertEqual(page(list(range(10)), 4, 3), [9])

    def test_a_page_past_the_end_is_empty(self):
        self.assertEqual(page(list(range(10)), 5, 3), [])

    def test_every_item_is_on_exactly_one_page(self):
        items = list(range(23))
        pages = [page(items, n, 5) for n in range(1, page_count(items, 5) + 1)]
        self.assertEqual([item for one in pages for item in one], items)

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(ValueError):
            page([1], 0, 3)
