"""Which episodes of a stream go into the page, so that the file of a whole experiment stays small.

The page has a byte budget, shared out over the streams (a stream that needs less than its share
leaves the rest to the others). A stream that fits is shown whole. Otherwise episodes are taken in
tiers until the share is spent: first those within BOUNDARY steps of a phase boundary (where memories go
stale), then the failures, then the rest; a tier that does not fit whole is thinned evenly over the
stream. An episode costs its own bytes plus, the first time its key appears, that key's timeline.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Episodes this many steps either side of a phase boundary are taken first.
BOUNDARY = 10


@dataclass(frozen=True)
class Tier:
    """A group of episodes (row positions) taken together, and what the page calls it."""

    name: str
    rows: Sequence[int]


def tiers(t: Sequence[int], success: Sequence[bool], boundaries: Sequence[int]) -> list[Tier]:
    """The tiers of a stream whose rows have steps `t` (sorted) and outcomes `success`; `boundaries`
    are the first steps of every phase but the first."""
    taken: set[int] = set()
    for b in boundaries:
        taken.update(range(bisect_left(t, b - BOUNDARY), bisect_right(t, b + BOUNDARY)))
    near = sorted(taken)
    failures = [i for i, ok in enumerate(success) if not ok and i not in taken]
    taken.update(failures)
    rest = [i for i in range(len(t)) if i not in taken]
    return [
        Tier(f"within {BOUNDARY} steps of a phase boundary", near),
        Tier("failures", failures),
        Tier("others", rest),
    ]


def spread(rows: Sequence[int]) -> list[int]:
    """`rows` reordered so that every prefix is spread evenly over them: every 2^k-th first, then the
    ones halfway between, and so on."""
    order, seen = [], set()
    step = 1
    while step < len(rows):
        step *= 2
    while step >= 1:
        for i in range(0, len(rows), step):
            if i not in seen:
                seen.add(i)
                order.append(rows[i])
        step //= 2
    return order


def choose(
    tier_list: Sequence[Tier],
    costs: Sequence[int],
    keys: Sequence[str],
    key_costs: Mapping[str, int],
    budget: int,
) -> tuple[list[int], list[tuple[str, int, int]]]:
    """The rows to show (sorted) within `budget` bytes, and per tier (name, shown, of how many)."""
    chosen: list[int] = []
    keys_in: set[str] = set()
    used = 0
    summary = []
    for tier in tier_list:
        shown = 0
        for row in spread(tier.rows):
            cost = costs[row] + (0 if keys[row] in keys_in else key_costs.get(keys[row], 0))
            if used + cost > budget:
                continue
            used += cost
            keys_in.add(keys[row])
            chosen.append(row)
            shown += 1
        summary.append((tier.name, shown, len(tier.rows)))
    return sorted(chosen), summary


def shares(needs: Sequence[int], total: int) -> list[int]:
    """Each stream's share of `total` bytes: an equal share, or what it needs when that is less (the
    remainder going to the others)."""
    given = [0] * len(needs)
    left = total
    order = sorted(range(len(needs)), key=lambda i: needs[i])
    for n, i in enumerate(order):
        given[i] = min(needs[i], left // (len(needs) - n))
        left -= given[i]
    return given


def describe(summary: Sequence[tuple[str, int, int]]) -> str:
    """The sample in one line, e.g. "all 1600 episodes" or "912 of 1600 episodes: all 60 within 10 steps
    of a phase boundary, 812 of 1100 failures (evenly spread), none of the 440 others"."""
    shown = sum(s for _, s, _ in summary)
    total = sum(n for _, _, n in summary)
    if shown == total:
        return f"all {total} episodes"
    parts = []
    for name, s, n in summary:
        if n == 0:
            continue
        if s == n:
            parts.append(f"all {n} {name}")
        elif s == 0:
            parts.append(f"none of the {n} {name}")
        else:
            parts.append(f"{s} of {n} {name} (evenly spread)")
    return f"{shown} of {total} episodes: " + ", ".join(parts)
