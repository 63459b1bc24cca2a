"""Temperature conversions."""


def c_to_f(celsius: float) -> float:
    """Degrees Celsius in degrees Fahrenheit."""
    return celsius * 5 / 9 + 32


def f_to_c(fahrenheit: float) -> float:
    """Degrees Fahrenheit in degrees Celsius."""
    return (fahrenheit - 32) * 5 / 9
