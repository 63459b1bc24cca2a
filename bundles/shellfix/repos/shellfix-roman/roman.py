"""Roman numerals."""

VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def from_roman(text: str) -> int:
    """The value of a Roman numeral such as "MCMXCIV" (1994)."""
    total = 0
    for i, letter in enumerate(text):
        value = VALUES[letter]
        if i + 1 < len(text) and value <= VALUES[text[i + 1]]:
            total -= value
        else:
            total += value
    return total
