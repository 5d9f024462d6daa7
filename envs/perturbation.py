"""Outcome noise and random reversals: the two perturbations the drift environments share.

Both are off by default (`noise=0`, `reversal_rate=0`): then no random number is drawn for them and a
stream is exactly the stream it was without them.

**Outcome noise** (`noise`, `false_success`). Before a stream starts, every decision episode t gets one
uniform draw u_t from the stream's own noise RNG, whatever the agent will do, so every method sees the
same episodes misreported and paired comparisons stay paired. A correct action is reported failed when
u_t < `noise`; a wrong action is reported succeeded when u_t < `false_success` (None: equal to `noise`,
symmetric noise). Only what the agent is told is misreported (the observation written to memory and the
feedback); the episode is scored by the true outcome. A trial (TEPA-Full) is an execution too: its
outcome is misreported with the same rates, drawn from the trial RNG.

**Random reversals** (`reversal_rate`). Besides the fixed phases, each unit (a job in controlled_drift, a
tool in executable_drift) reverses before episode t >= 1 with probability `reversal_rate`, independently
of the other units and of earlier reversals (a per-unit hazard per episode, from the stream's reversal
RNG). A reversal *returns* the unit to the value it had before its current one, so a revocable memory's
archived precedent becomes right again and re-promotion has something to win; a unit that has had only
one value moves to one drawn uniformly from its other values. A phase boundary sets the phase's value
first (an old value it replaces becomes the unit's previous one); a reversal drawn for the same episode
applies after it.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from tepa.validation import check_between, check_unit

#: The largest outcome noise accepted: at 0.5 an outcome says nothing about the action; above it, the
#: reports would mean the opposite of what they say.
MAX_NOISE = 0.5


class OutcomeNoise:
    """The misreporting rates of one environment (see the module docstring), checked."""

    def __init__(self, noise: float, false_success: float | None) -> None:
        self.noise = check_between("noise", noise, 0.0, MAX_NOISE)
        rate = self.noise if false_success is None else false_success
        self.false_success = check_between("false_success", rate, 0.0, MAX_NOISE)
        self.active = self.noise > 0 or self.false_success > 0

    def draws(self, rng: random.Random, n: int) -> list[float]:
        """The per-episode uniforms of a stream of `n` episodes (none when there is no noise)."""
        return [rng.random() for _ in range(n)] if self.active else []

    def report(self, success: bool, u: float) -> bool:
        """What the agent is told about an execution whose true outcome is `success`, given its draw."""
        if success:
            return not u < self.noise
        return u < self.false_success


def check_reversal_rate(value: Any) -> float:
    """A per-unit, per-episode probability of a reversal."""
    return check_unit("reversal_rate", value)


class ReversalSchedule:
    """Each unit's value at every episode: the phases' values plus random reversals (module docstring).

    `starts` are the phases' first episodes (the first is 0), `phase_values[i]` maps every unit to its
    value in phase i, `alternatives[unit]` are the values a unit may take, `n` is the stream's length.
    """

    def __init__(
        self,
        starts: Sequence[int],
        phase_values: Sequence[Mapping[Hashable, Any]],
        alternatives: Mapping[Hashable, Sequence[Any]],
        rate: float,
        n: int,
        rng: random.Random,
    ) -> None:
        units = list(phase_values[0])
        current = dict(phase_values[0])
        previous: dict[Hashable, Any] = {}
        self._times: dict[Hashable, list[int]] = {u: [0] for u in units}
        self._values: dict[Hashable, list[Any]] = {u: [current[u]] for u in units}
        self.reversals = 0
        phase_at = dict(zip(starts, phase_values, strict=True))
        for t in range(1, n):
            changed = []
            for unit, value in phase_at.get(t, {}).items():
                if value != current[unit]:
                    previous[unit], current[unit] = current[unit], value
                    changed.append(unit)
            for unit in units:
                if rng.random() < rate:
                    old = previous.get(unit)
                    if old is None or old == current[unit]:
                        old = rng.choice([v for v in alternatives[unit] if v != current[unit]])
                    previous[unit], current[unit] = current[unit], old
                    self.reversals += 1
                    changed.append(unit)
            for unit in dict.fromkeys(changed):
                self._times[unit].append(t)
                self._values[unit].append(current[unit])

    def at(self, unit: Hashable, t: int) -> Any:
        """The unit's value at episode `t`."""
        return self._values[unit][bisect_right(self._times[unit], t) - 1]

    def changes(self, unit: Hashable) -> list[tuple[int, Any]]:
        """`(t, value)` for the unit's first value and every change after it."""
        return list(zip(self._times[unit], self._values[unit], strict=True))
