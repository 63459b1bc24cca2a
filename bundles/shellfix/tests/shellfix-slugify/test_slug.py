import unittest

from slug import slugify


class SlugTest(unittest.TestCase):
    def test_words_are_joined_by_dashes(self):
        self.assertEqual(slugify("Fix the Bug"), "fix-the-bug")

    def test_no_dash_at_either_end(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  -- Release 2.0 --  "), "release-2-0")
