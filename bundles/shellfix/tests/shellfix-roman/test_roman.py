import unittest

from roman import from_roman


class RomanTest(unittest.TestCase):
    def test_repeated_letters_add(self):
        self.assertEqual(from_roman("III"), 3)
        self.assertEqual(from_roman("XX"), 20)
        self.assertEqual(from_roman("MMM"), 3000)

    def test_a_smaller_letter_before_a_larger_subtracts(self):
        self.assertEqual(from_roman("IV"), 4)
        self.assertEqual(from_roman("IX"), 9)
        self.assertEqual(from_roman("XC"), 90)

    def test_a_long_numeral(self):
        self.assertEqual(from_roman("MCMXCIV"), 1994)
        self.assertEqual(from_roman("MMXXIII"), 2023)
