"""The value checks every object's constructor needs, each raising one sentence that names the key, the bad
value and what is expected (the object that owns a setting checks it; these helpers keep the sentences alike)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def is_int(value) -> bool:
    """An integer, and not a bool (True is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_written(value) -> str:
    """A value as a user writes it on the command line: a float as the shortest number that reads back the same
    (-1, not -1.0, which the config's float type made of it; 1e12, not 1000000000000.0); anything else as repr."""
    if not isinstance(value, float) or not math.isfinite(value):
        return repr(value)
    text = repr(value)  # the shortest digits that read back the same
    if "e" not in text and text.endswith(".0"):
        text = text[:-2]
        digits = text.lstrip("-").rstrip("0")
        zeros = len(text.lstrip("-")) - len(digits)
        if zeros >= 7:  # 1000000000000 -> 1e12
            text = f"{'-' * (value < 0)}{digits[0]}{'.' * (len(digits) > 1)}{digits[1:]}e{zeros + len(digits) - 1}"
    return text.replace("e+", "e").replace("e-0", "e-")


def positive_int(key: str, value, why: str = "") -> int:
    """``value`` when it is an integer >= 1; else ``<key>=<value> must be a positive integer<why>.``"""
    if not is_int(value) or value < 1:
        raise ValueError(f"{key}={value!r} must be a positive integer{why}.")
    return value


def non_negative_int(key: str, value, why: str = "") -> int:
    """``value`` when it is an integer >= 0; else ``<key>=<value> must be a whole number >= 0<why>.``"""
    if not is_int(value) or value < 0:
        raise ValueError(f"{key}={value!r} must be a whole number >= 0{why}.")
    return value


def positive_number(key: str, value, why: str = "") -> float:
    """``value`` when it is a finite number > 0 (a bool is not one); else ``<key>=<value> must be a positive
    number<why>.``"""
    if not is_number(value) or value <= 0:
        raise ValueError(f"{key}={value!r} must be a positive number{why}.")
    return value


def number(key: str, value) -> float:
    """``value`` when it is a finite number; else ``<key>=<value> must be a number.``"""
    if not is_number(value):
        raise ValueError(f"{key}={value!r} must be a number.")
    return value


def true_or_false(key: str, value) -> None:
    """Nothing when ``value`` is a bool; else ``<key>=<value> must be true or false.`` (1, 'yes' or 'maybe' is not a
    switch: a string would read as true)."""
    if not isinstance(value, bool):
        raise ValueError(f"{key}={value!r} must be true or false.")


def one_of(key: str, value, options: Iterable) -> None:
    """Nothing when ``value`` is one of ``options``; else ``<key>=<value> is not one of a, b.``"""
    options = tuple(options)
    if value not in options:
        raise ValueError(f"{key}={value!r} is not one of {', '.join(map(str, options))}.")
