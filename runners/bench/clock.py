"""The CPU clock the benchmarks that run subprocesses read."""

from __future__ import annotations

import resource
import statistics
import time


def children_cpu() -> float:
    """User plus system CPU seconds of the finished child processes (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def paired_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median of the rounds' ratios (one pair per round, timed back to back), to 3 decimals: a round
    the machine slowed slows both sides of its ratio alike."""
    return round(statistics.median(a / b for a, b in zip(numerators, denominators, strict=True)), 3)


#: Rounds of the speed probe; its figure is their median.
PROBE_ROUNDS = 7


def machine_speed() -> float:
    """CPU milliseconds of a fixed pure-Python workload (dict, string and integer operations, none of
    this project's code), the median of PROBE_ROUNDS rounds. A quiet load average does not make a fast
    machine (a shared host's cores run slower at busy times): reports measured on different days compare
    through this figure, which the project's changes cannot move."""
    rounds = []
    for _ in range(PROBE_ROUNDS):
        start = time.process_time()
        counts: dict[str, int] = {}
        for i in range(200_000):
            key = f"k{i % 997}"
            counts[key] = counts.get(key, 0) + (i * 31) % 7
        sum(len(key) * n for key, n in sorted(counts.items()))
        rounds.append(time.process_time() - start)
    return round(statistics.median(rounds) * 1000, 1)
