"""The staleness rule: which of a decision's retrieved lines are current and which are stale.

A retrieved line is *current* when its verdict agrees with the truth of its hop (VALID and its value is
the truth, or FAILED and its value is not) and *stale* otherwise. The agent loop logs `episode_quality`
for every decision (the QUALITY columns of `analysis.streamlog.record`); `analysis.metrics.memory_quality`
aggregates them and the transcript viewer marks lines with `is_stale`. Light on imports: the loop imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Line(Protocol):
    """A retrieved line as the rule reads it (`tepa.evidence.Evidence` is one)."""

    @property
    def holds(self) -> bool: ...  # VALID (True) or FAILED (False)

    @property
    def value(self) -> str: ...


def is_stale(verdict: str, value: str, truth: str) -> bool:
    """The rule: a retrieved line is *current* when its verdict agrees with the truth of its hop (VALID
    and its value is the truth, or FAILED and its value is not), *stale* otherwise."""
    return (verdict == "VALID") != (value == truth)


#: A hop's lines by verdict and agreement with its truth: (VALID and the truth, VALID and another value,
#: FAILED and the truth, FAILED and another value).
Counts = tuple[int, int, int, int]


def hop_counts(hop: Sequence[Line], truth: str) -> Counts:
    """The four counts of one hop's lines against its truth (`Counts`); counts of consecutive parts of
    a hop add up to the hop's."""
    valid_true = valid_other = failed_true = failed_other = 0
    for line in hop:
        if line.holds:
            if line.value == truth:
                valid_true += 1
            else:
                valid_other += 1
        elif line.value == truth:
            failed_true += 1
        else:
            failed_other += 1
    return valid_true, valid_other, failed_true, failed_other


def quality(counts: Sequence[Counts | None]) -> dict[str, object]:
    """The QUALITY fields of one decision from each hop's counts (None: a hop whose truth is unknown,
    which counts nothing)."""
    known = truth_present = stale_present = polluted = False
    current = stale = 0
    for hop in counts:
        if hop is None:
            continue
        known = True
        valid_true, valid_other, failed_true, failed_other = hop
        current += valid_true + failed_other
        stale += valid_other + failed_true
        truth_present |= valid_true > 0
        stale_present |= valid_other > 0
        polluted |= valid_other > valid_true
    return {
        "truth_known": known,
        "current": current,
        "stale": stale,
        "truth_present": truth_present,
        "stale_present": stale_present,
        "polluted": polluted,
    }


def episode_quality(hops: Sequence[Sequence[Line]], truths: Sequence[str | None] | None) -> dict[str, object]:
    """The QUALITY fields of one decision from each hop's retrieved lines and the truth of its key (None:
    the environment reports no truth). Hops whose truth is None count nothing."""
    truths = truths if truths is not None else [None] * len(hops)
    return quality(
        [None if truth is None else hop_counts(hop, truth) for hop, truth in zip(hops, truths, strict=True)]
    )
