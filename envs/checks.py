"""Validation of environment constructor arguments: one wording for every environment's errors, each
naming the parameter."""

from __future__ import annotations

import operator
from numbers import Real
from typing import Any


def int_in(name: str, value: Any, low: int, high: int | None = None) -> int:
    """`value` as an int in [low, high]; a ValueError naming the parameter otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number < low or (high is not None and number > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bounds}, got {number}")
    return number


def fraction(name: str, value: Any) -> float:
    """`value` as a float in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def rate(name: str, value: Any) -> float:
    """`value` as a probability in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)
