import unittest

from fizzbuzz import say, sequence


class FizzBuzzTest(unittest.TestCase):
    def test_multiples_of_both(self):
        self.assertEqual(say(15), "FizzBuzz")
        self.assertEqual(say(45), "FizzBuzz")

    def test_multiples_of_one(self):
        self.assertEqual(say(9), "Fizz")
        self.assertEqual(say(10), "Buzz")

    def test_the_first_fifteen(self):
        self.assertEqual(sequence(15)[-3:], ["13", "14", "FizzBuzz"])
