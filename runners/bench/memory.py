"""Benchmark 1: raw memory-operation throughput through the `Memory` protocol.

One synthetic stream, identical for every method, of observations over many keys whose current value
drifts: phases of equal length, each drawing a fresh regime (key -> current value) except the last of
three or more, which returns to the first regime (so TEPA's re-promotion path is exercised too). Each
observation is an action on a random key, the current value with probability `p_correct`, otherwise a
random value, and holds iff it was the current value. Every `decide_every`-th observation is a
decision, as in the agent loop: `retrieve` by key first, then `observe` the outcome, then `feedback`
with the retrieved evidence whose value was acted on. An event is one protocol call (observe, retrieve
or feedback). Keys are drawn from one fixed set of key objects, as an environment's are.

The stream is built once and frozen out of the garbage collector's view (`gc.freeze`), so a method's
timing includes its own allocations and collections but not the stream's.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tepa.evidence import Observation, Query
from tepa.protocol import Memory, TrialMemory


@dataclass(frozen=True)
class OpStream:
    """A prepared stream: per phase, the (observation, query or None) steps; the regimes; the counts."""

    phases: tuple[tuple[tuple[Observation, Query | None], ...], ...]
    regimes: tuple[tuple[str, ...], ...]
    n_observations: int
    n_decisions: int

    @property
    def n_events(self) -> int:
        """Protocol calls per pass: every observation, plus a retrieve and a feedback per decision."""
        return self.n_observations + 2 * self.n_decisions


def make_stream(
    n_observations: int = 1_000_000,
    n_keys: int = 10_000,
    n_values: int = 4,
    n_phases: int = 4,
    decide_every: int = 2,
    p_correct: float = 0.7,
    seed: int = 0,
) -> OpStream:
    """Build the stream described in the module docstring (deterministic for a seed)."""
    for name, value, low in (
        ("n_observations", n_observations, 1),
        ("n_keys", n_keys, 1),
        ("n_values", n_values, 2),
        ("n_phases", n_phases, 1),
        ("decide_every", decide_every, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not 0.0 <= p_correct <= 1.0:
        raise ValueError(f"p_correct must be in [0, 1], got {p_correct!r}")
    enabled = gc.isenabled()
    gc.disable()  # the stream is a million long-lived tuples: collecting while building them is waste
    try:
        return _build(n_observations, n_keys, n_values, n_phases, decide_every, p_correct, seed)
    finally:
        if enabled:
            gc.enable()


def _build(
    n_observations: int,
    n_keys: int,
    n_values: int,
    n_phases: int,
    decide_every: int,
    p_correct: float,
    seed: int,
) -> OpStream:
    rng = random.Random(seed)
    values = tuple(f"v{i}" for i in range(n_values))
    first = tuple(rng.choice(values) for _ in range(n_keys))
    regimes = [first]
    for i in range(1, n_phases):
        regimes.append(
            first if i == n_phases - 1 and n_phases > 2 else tuple(rng.choice(values) for _ in range(n_keys))
        )
    texts = {(v, ok): f'action "{v}" {"worked" if ok else "failed"}' for v in values for ok in (True, False)}
    query_texts = tuple(f"key {k}: pick the value that works" for k in range(n_keys))
    keys = tuple(range(n_keys))
    bounds = [n_observations * i // n_phases for i in range(n_phases + 1)]
    phases = []
    n_decisions = 0
    for i, regime in enumerate(regimes):
        steps = []
        for t in range(bounds[i], bounds[i + 1]):
            key = keys[rng.randrange(n_keys)]
            current = regime[key]
            value = current if rng.random() < p_correct else rng.choice(values)
            ok = value == current
            obs = Observation(key, value, ok, t, texts[value, ok], "outcome")
            query = None
            if t % decide_every == 0:
                query = Query(key, query_texts[key], t)
                n_decisions += 1
            steps.append((obs, query))
        phases.append(tuple(steps))
    return OpStream(tuple(phases), tuple(regimes), n_observations, n_decisions)


def stream_trial(stream: OpStream, phase: list[int]) -> Callable[[object, str], bool]:
    """A trial function for TEPA-Full on the stream: support passes iff the precedent's value is its
    key's current value (in phase `phase[0]`); the other kinds pass (keys are independent here)."""
    regimes = stream.regimes

    def trial(precedent: object, kind: str) -> bool:
        if kind != "support":
            return True
        return regimes[phase[0]][precedent.key] == precedent.value  # type: ignore[attr-defined]

    return trial


def run_stream_ops(memory: Memory, stream: OpStream) -> float:
    """Feed the whole stream to `memory` and return the CPU seconds it took. CPU time, not wall time:
    the benchmark is single-threaded, and CPU time does not count the time other processes on a busy
    machine take the core away."""
    phase = [0]
    if isinstance(memory, TrialMemory):
        memory.set_trial(stream_trial(stream, phase))
    observe, retrieve, feedback = memory.observe, memory.retrieve, memory.feedback
    start = time.process_time()
    for i, steps in enumerate(stream.phases):
        phase[0] = i
        if i:
            memory.on_phase_boundary(f"phase{i}", steps[0][0].t if steps else 0)
        for obs, query in steps:
            if query is None:
                observe(obs)
                continue
            evidence = retrieve(query)
            observe(obs)
            value = obs.value
            feedback([e for e in evidence if e.value == value], obs.holds, obs.t)
    return time.process_time() - start


def measure(
    factories: dict[str, Callable[[], Memory]],
    stream: OpStream,
    repeats: int,
    reference: str = "lww",
) -> dict[str, dict[str, object]]:
    """Events per second of every method, `repeats` times in rotated order, and each method's time
    relative to `reference` within the same repetition; medians over repetitions."""
    if reference not in factories:
        raise ValueError(f"reference must be one of the methods, got {reference!r}")
    names = list(factories)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    gc.collect()
    gc.freeze()
    try:
        for r in range(repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                memory = factories[name]()
                seconds[name].append(run_stream_ops(memory, stream))
                del memory
                gc.collect()
    finally:
        gc.unfreeze()
    out: dict[str, dict[str, object]] = {}
    for name in names:
        ratios = [s / ref for s, ref in zip(seconds[name], seconds[reference], strict=True)]
        out[name] = {
            "seconds": seconds[name],
            "events_per_s": median([stream.n_events / s for s in seconds[name]]),
            f"time_vs_{reference}": median(ratios),
        }
    return out


def median(xs: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    if not xs:
        raise ValueError("median of an empty sequence")
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
