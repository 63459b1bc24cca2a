import unittest

from words import count_words, top_words


class CountTest(unittest.TestCase):
    def test_plain_words(self):
        self.assertEqual(count_words("a b a"), {"a": 2, "b": 1})

    def test_case_is_ignored(self):
        self.assertEqual(count_words("The cat saw the other cat. THE END"),
                         {"the": 3, "cat": 2, "saw": 1, "other": 1, "end": 1})

    def test_top_words(self):
        self.assertEqual(top_words("Dog dog cat Bird cat DOG", 2), [("dog", 3), ("cat", 2)])
