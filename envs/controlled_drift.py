"""controlled_drift: K jobs, each completed by one of A actions, under a hidden regime that drifts.

The cleanest setting for memory pollution: the regime (job -> correct action) is fixed within a phase
and changes at phase boundaries, so whatever memory learned in one phase is stale in the next. The
default phases are stable (regime R1) -> full_reversal (every job's action changes) -> partial_reversal
(half of the jobs change again) -> return (R1 exactly, where a revocable memory can re-promote what it
archived). A changed job moves to an action it has not used in any earlier regime while one is left,
so a "change" never silently returns to an old regime; only a "return" phase does that.

All jobs share one vocabulary of action names (`actions`, default `ACTION_NAMES`; the first `n_actions`
are used); each task shows them in a freshly shuffled order so that a model's position bias cannot stand
in for knowledge. The stream never depends on the agent's actions. A real model scored by the
log-likelihood of an option's text favours names its tokenizer keeps whole, so real-model runs use a
vocabulary of single-token words (conf/env/controlled_drift_words.yaml).

Two perturbations, both off by default (`envs.perturbation` defines them exactly): outcome noise
(`noise`, `false_success`: a correct action reported failed, a wrong one reported succeeded; scoring uses
the true outcome) and random reversals (`reversal_rate`: a per-job hazard per episode; a reversal
returns the job to its previous action).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs.base import MAX_KEYS, TRIAL_KINDS, EnvironmentBase, Outcome, Task
from envs.perturbation import OutcomeNoise, ReversalSchedule, check_reversal_rate
from tepa.evidence import Observation
from tepa.validation import check_fraction, check_int

ACTION_NAMES = (
    "rotate-left", "rotate-right", "flip", "compress", "archive", "retry", "restart", "rollback",
    "patch", "rebuild", "reindex", "migrate", "escalate", "skip", "split", "merge",
)  # fmt: skip
CHANGES = ("none", "full", "partial", "return")


@dataclass(frozen=True, slots=True)
class DriftPhase:
    """One phase: its name, how the regime changes at its start, and its length.

    `change` is "none" (keep the previous regime; the first phase draws R1), "full" (every job moves to
    a new action), "partial" (a `partial_fraction` of the jobs, drawn at random, move) or "return" (back
    to the first phase's regime). `length=None` means the environment's `phase_length`.
    """

    name: str
    change: str = "none"
    length: int | None = None


DEFAULT_PHASES = (
    DriftPhase("stable", "none"),
    DriftPhase("full_reversal", "full"),
    DriftPhase("partial_reversal", "partial"),
    DriftPhase("return", "return"),
)


class ControlledDrift(EnvironmentBase):
    """The controlled-drift environment (see the module docstring).

    Trials (TEPA-Full) run on the regime of the latest task and draw from their own RNG, so they never
    change the stream:
    - support: execute the precedent's action on its own job; passes iff it completes the job.
    - counterfactual: execute it on another job whose current action differs from it (a task where it
      should not apply); passes iff it fails there. Fails when no such job exists (the action is
      currently right for every job, so the precedent is not specific to its job).
    - contamination: after the trial, a random other job's current action still completes that job.
      Jobs are independent here, so this passes for every well-formed precedent (it is vacuous with a
      single job); environments with shared state make it bite.
    A precedent whose key is not a job or whose value is not an action fails every trial.
    """

    name = "controlled_drift"

    def __init__(
        self,
        *,
        n_keys: int = 4,
        n_actions: int = 3,
        phase_length: int = 400,
        phases: Sequence[DriftPhase | Mapping[str, Any] | Sequence[Any]] | None = None,
        partial_fraction: float = 0.5,
        actions: Sequence[str] | None = None,
        noise: float = 0.0,
        false_success: float | None = None,
        reversal_rate: float = 0.0,
    ) -> None:
        vocabulary = ACTION_NAMES if actions is None else _action_names(actions)
        self.n_keys = check_int("n_keys", n_keys, 1, MAX_KEYS)
        self.n_actions = check_int("n_actions", n_actions, 2)
        if self.n_actions > len(vocabulary):
            raise ValueError(f"n_actions must be at most the {len(vocabulary)} action names, got {n_actions}")
        self.phase_length = check_int("phase_length", phase_length, 1)
        self.partial_fraction = check_fraction("partial_fraction", partial_fraction)
        self.phases = _parse_phases(DEFAULT_PHASES if phases is None else phases, self.phase_length)
        self.outcome_noise = OutcomeNoise(noise, false_success)
        self.reversal_rate = check_reversal_rate(reversal_rate)
        self._actions = tuple(vocabulary[: self.n_actions])
        self._action_set = frozenset(self._actions)
        self._key_set = frozenset(range(self.n_keys))
        self._texts = tuple(f"Job {k}: pick the action that completes it." for k in range(self.n_keys))
        self._starts: list[int] = []
        start = 0
        for phase in self.phases:
            self._starts.append(start)
            start += phase.length  # type: ignore[operator]  # lengths are resolved by _parse_phases
        self._seed: int | None = None
        self._regimes: list[tuple[str, ...]] = []
        self._schedule: ReversalSchedule | None = None  # random reversals, when reversal_rate > 0
        self._noise: list[float] = []  # per-episode draws of the outcome noise, when there is noise
        self._trial_rng = random.Random(0)
        self._now = 0

    def __len__(self) -> int:
        """Decision episodes in the stream (for progress bars)."""
        return self._starts[-1] + self.phases[-1].length

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(start, phase.name) for start, phase in zip(self._starts[1:], self.phases[1:], strict=True)]

    def reset(self, seed: int) -> None:
        self._seed = check_int("seed", seed, 0)
        self._regimes = self._draw_regimes(random.Random(f"{self.name}/{self._seed}/regimes"))
        self._trial_rng = random.Random(f"{self.name}/{self._seed}/trials")
        self._schedule = None
        if self.reversal_rate > 0:
            self._schedule = ReversalSchedule(
                self._starts,
                [dict(enumerate(regime)) for regime in self._regimes],
                {k: self._actions for k in range(self.n_keys)},
                self.reversal_rate,
                len(self),
                random.Random(f"{self.name}/{self._seed}/reversals"),
            )
        self._noise = self.outcome_noise.draws(random.Random(f"{self.name}/{self._seed}/noise"), len(self))
        self._now = 0

    def tasks(self) -> Iterator[Task]:
        self._require_reset()
        return self._stream(random.Random(f"{self.name}/{self._seed}/tasks"))

    def _stream(self, rng: random.Random) -> Iterator[Task]:
        n_keys, actions, texts = self.n_keys, self._actions, self._texts
        t = 0
        for phase, regime in zip(self.phases, self._regimes, strict=True):
            for _ in range(phase.length):  # type: ignore[arg-type]
                key = rng.randrange(n_keys)
                self._now = t
                yield Task(
                    key=key,
                    text=texts[key],
                    phase=phase.name,
                    t=t,
                    options=tuple(rng.sample(actions, len(actions))),
                    correct=regime[key] if self._schedule is None else self._schedule.at(key, t),
                )
                t += 1

    def execute(self, task: Task, action: str) -> Outcome:
        key = task.key
        if not isinstance(action, str) or action not in self._action_set:
            return Outcome(
                False, (), f"invalid action {_clip(action)}: choose one of {', '.join(task.options)}"
            )
        success = self._completes(task.t, key, action)
        reported = self._reported(success, self._noise[task.t] if self._noise else None)
        verb = "worked" if reported else "failed"
        obs = Observation(key, action, reported, task.t, f'action "{action}" {verb} for job {key}', "outcome")
        message = f"job {key} completed" if reported else f'action "{action}" did not complete job {key}'
        return Outcome(success, (obs,), message, reported=reported)

    def trial(self, precedent: Any, kind: str) -> bool:
        if kind not in TRIAL_KINDS:
            raise ValueError(f"kind must be one of {TRIAL_KINDS}, got {kind!r}")
        self._require_reset()
        key, value = getattr(precedent, "key", None), getattr(precedent, "value", None)
        if not _member(key, self._key_set) or not _member(value, self._action_set):
            return False
        now = self._now
        if kind == "support":
            return self._trial_outcome(self._completes(now, key, value))
        others = [k for k in range(self.n_keys) if k != key]
        if kind == "counterfactual":
            elsewhere = [k for k in others if self._correct(now, k) != value]
            if not elsewhere:
                return False
            return not self._trial_outcome(self._completes(now, self._trial_rng.choice(elsewhere), value))
        if not others:
            return True
        other = self._trial_rng.choice(others)
        return self._trial_outcome(self._completes(now, other, self._correct(now, other)))

    def truth(self, key: Hashable) -> str | None:
        """The action that completes job `key` at the latest task: its phase's regime, or where random
        reversals run, the schedule's (None: not a job)."""
        self._require_reset()
        return self._correct(self._now, key) if _member(key, self._key_set) else None

    def _regime_at(self, t: int) -> tuple[str, ...]:
        return self._regimes[max(bisect_right(self._starts, t) - 1, 0)]

    def _correct(self, t: int, key: int) -> str:
        """Job `key`'s action at time `t`: its phase's, or where random reversals run, the schedule's."""
        if self._schedule is not None:
            return self._schedule.at(key, t)
        return self._regime_at(t)[key]

    def _completes(self, t: int, key: Any, action: str) -> bool:
        """Executing `action` on job `key` at time `t`: the one place success is decided."""
        return self._correct(t, key) == action

    def _reported(self, success: bool, u: float | None) -> bool:
        """What the agent is told about an execution (`u`: its noise draw, None without noise)."""
        return success if u is None else self.outcome_noise.report(success, u)

    def _trial_outcome(self, success: bool) -> bool:
        """A trial's execution as reported: misreported like an episode's, drawing from the trial RNG."""
        return self._reported(success, self._trial_rng.random() if self.outcome_noise.active else None)

    def _draw_regimes(self, rng: random.Random) -> list[tuple[str, ...]]:
        """One regime per phase; a changed job avoids every action it has had, while one is left."""
        first = tuple(rng.choice(self._actions) for _ in range(self.n_keys))
        used = [{a} for a in first]
        regimes = [first]
        n_partial = max(1, round(self.partial_fraction * self.n_keys))
        for phase in self.phases[1:]:
            current = list(regimes[-1])
            if phase.change == "return":
                current = list(first)
            elif phase.change in ("full", "partial"):
                changed = (
                    range(self.n_keys)
                    if phase.change == "full"
                    else rng.sample(range(self.n_keys), n_partial)
                )
                for k in changed:
                    fresh = [a for a in self._actions if a not in used[k]]
                    current[k] = rng.choice(fresh or [a for a in self._actions if a != current[k]])
                    used[k].add(current[k])
            regimes.append(tuple(current))
        return regimes

    def _require_reset(self) -> None:
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the environment")


def _parse_phases(phases: Sequence[Any], phase_length: int) -> tuple[DriftPhase, ...]:
    """Accept DriftPhase objects, mappings (as Hydra configs give them) or (name, change[, length])."""
    if isinstance(phases, str | bytes) or not isinstance(phases, Sequence) or not phases:
        raise ValueError(f"phases must be a non-empty sequence of phases, got {phases!r}")
    parsed = []
    for spec in phases:
        if isinstance(spec, DriftPhase):
            phase = spec
        elif isinstance(spec, Mapping):
            unknown = set(spec) - {"name", "change", "length"}
            if unknown or "name" not in spec:
                raise ValueError(
                    f"phases: each phase needs a name (and optional change, length), got {spec!r}"
                )
            phase = DriftPhase(spec["name"], spec.get("change", "none"), spec.get("length"))
        elif isinstance(spec, Sequence) and not isinstance(spec, str | bytes) and 1 <= len(spec) <= 3:
            phase = DriftPhase(*spec)
        else:
            raise ValueError(f"phases: cannot read phase {spec!r}")
        if not isinstance(phase.name, str) or not phase.name:
            raise ValueError(f"phases: phase name must be a non-empty string, got {phase.name!r}")
        if phase.change not in CHANGES:
            raise ValueError(
                f"phases: change of {phase.name!r} must be one of {CHANGES}, got {phase.change!r}"
            )
        key = f"phases[{phase.name}].length"
        length = phase_length if phase.length is None else check_int(key, phase.length, 1)
        parsed.append(DriftPhase(phase.name, phase.change, length))
    if parsed[0].change != "none":
        raise ValueError(
            f"phases: the first phase draws the first regime, so its change must be 'none', "
            f"got {parsed[0].change!r}"
        )
    return tuple(parsed)


def _action_names(actions: Any) -> tuple[str, ...]:
    """A vocabulary: distinct (ignoring case, as replies are matched), non-empty, printable names without
    surrounding spaces."""
    if isinstance(actions, str | bytes) or not isinstance(actions, Sequence):
        raise ValueError(f"actions must be a list of action names, got {_clip(actions)}")
    seen: set[str] = set()
    for name in actions:
        if not isinstance(name, str) or not name or not name.isprintable() or name != name.strip():
            raise ValueError(
                f"actions must be non-empty printable names without surrounding spaces, got {_clip(name)}"
            )
        if name.lower() in seen:
            raise ValueError(f"actions must be distinct (ignoring case), got {_clip(name)} twice")
        seen.add(name.lower())
    return tuple(actions)


def _member(item: Any, items: frozenset) -> bool:
    """Membership that tolerates unhashable, untrusted items."""
    try:
        return item in items
    except TypeError:
        return False


def _clip(action: Any, limit: int = 60) -> str:
    """A log-safe rendering of an untrusted action."""
    text = repr(action)
    return text if len(text) <= limit else text[: limit - 3] + "..."
