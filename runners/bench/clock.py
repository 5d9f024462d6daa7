"""The CPU clock the benchmarks that run subprocesses read."""

from __future__ import annotations

import resource
import statistics


def children_cpu() -> float:
    """User plus system CPU seconds of the finished child processes (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def paired_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median of the rounds' ratios (one pair per round, timed back to back), to 3 decimals: a round
    the machine slowed slows both sides of its ratio alike."""
    return round(statistics.median(a / b for a, b in zip(numerators, denominators, strict=True)), 3)
