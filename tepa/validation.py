"""Range checks for constructor parameters, in one wording: "key=value: must be ...".

Memory methods and environments check their own parameters with these, so a value is checked in one
place (the class) and reads the same wherever it is rejected; `runners.config` prefixes the message with
the config group ("memory.theta_rev=1.5: must be in [0, 1]"). Each function returns the value (an int
or float as checked) so a constructor can check and store in one line.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection
from numbers import Real
from typing import Any


def _fail(key: str, value: Any, must: str) -> ValueError:
    return ValueError(f"{key}={value!r}: must be {must}")


def check_int(key: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """An integer (an int or a numpy integer, not a bool) in [low, high] (either bound may be None)."""
    if isinstance(value, bool):
        raise _fail(key, value, "an int")
    try:
        number = operator.index(value)
    except TypeError:
        raise _fail(key, value, "an int") from None
    if (low is not None and number < low) or (high is not None and number > high):
        must = f">= {low}" if high is None else f"<= {high}" if low is None else f"in [{low}, {high}]"
        raise _fail(key, value, must)
    return number


def check_real(key: str, value: Any) -> float:
    """A finite real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise _fail(key, value, "a finite number")
    return float(value)


def check_at_least(key: str, value: Any, low: float) -> float:
    """A finite number >= low."""
    if check_real(key, value) < low:
        raise _fail(key, value, f">= {low}")
    return float(value)


def check_positive(key: str, value: Any) -> float:
    """A finite number > 0."""
    if check_real(key, value) <= 0:
        raise _fail(key, value, "> 0")
    return float(value)


def check_unit(key: str, value: Any) -> float:
    """A number in [0, 1] (a probability or a threshold on one)."""
    if not 0.0 <= check_real(key, value) <= 1.0:
        raise _fail(key, value, "in [0, 1]")
    return float(value)


def check_between(key: str, value: Any, low: float, high: float) -> float:
    """A number in [low, high]."""
    if not low <= check_real(key, value) <= high:
        raise _fail(key, value, f"in [{low:g}, {high:g}]")
    return float(value)


def check_fraction(key: str, value: Any) -> float:
    """A number in (0, 1]: a share of something that must not be empty."""
    if not 0.0 < check_real(key, value) <= 1.0:
        raise _fail(key, value, "in (0, 1]")
    return float(value)


def check_bool(key: str, value: Any) -> bool:
    """True or False (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise _fail(key, value, "true or false")
    return value


def check_choice(key: str, value: Any, choices: Collection[str]) -> str:
    """One of `choices`."""
    if value not in choices:
        raise _fail(key, value, f"one of {', '.join(choices)}")
    return value
