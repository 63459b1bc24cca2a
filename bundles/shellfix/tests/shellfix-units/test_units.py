import unittest

from units import c_to_f, f_to_c


class ConversionTest(unittest.TestCase):
    def test_boiling_water(self):
        self.assertAlmostEqual(c_to_f(100), 212)

    def test_freezing_water(self):
        self.assertAlmostEqual(c_to_f(0), 32)

    def test_the_scales_meet_at_minus_forty(self):
        self.assertAlmostEqual(c_to_f(-40), -40)

    def test_round_trip(self):
        for celsius in (-12.5, 0, 21.3, 37):
            self.assertAlmostEqual(f_to_c(c_to_f(celsius)), celsius)
