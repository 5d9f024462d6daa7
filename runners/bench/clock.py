"""The CPU clock the benchmarks that run subprocesses read."""

from __future__ import annotations

import resource


def children_cpu() -> float:
    """User plus system CPU seconds of the finished child processes (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
