"""Property tests over every registered memory method (TEPA variants and baselines alike): random
streams of observe / retrieve / feedback / phase-boundary calls must never crash and must keep the
protocol's properties (`tepa.check_memory`, which must fail a memory that breaks one)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runners.registry import build_memory, memory_names
from tepa import Memory, MemoryCheckError, check_memory
from tepa.evidence import Evidence, Observation, Query
from tepa.memory_checker import check_stream

KEYS = [0, 1, "k", ("alice", "capital")]
VALUES = ["a", "b", "c"]
TEXT = st.text(alphabet="abk cpt", max_size=12)
TIME = st.integers(min_value=0, max_value=40)

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("observe"), st.sampled_from(KEYS), st.sampled_from(VALUES), st.booleans(), TIME, TEXT
        ),
        st.tuples(st.just("retrieve"), st.sampled_from([None, *KEYS, "never"]), TEXT, TIME),
        st.tuples(st.just("feedback"), st.sampled_from(VALUES), st.booleans(), TIME),
        st.tuples(st.just("boundary"), TIME),
    ),
    max_size=40,
)


def _episodes(draws) -> list[tuple]:
    """Agent-loop-shaped ops: retrieve for a key, act, report the outcome, observe it."""
    ops: list[tuple] = []
    for t, (key, action, success, boundary) in enumerate(draws):
        if boundary:
            ops.append(("boundary", t))
        ops += [
            ("retrieve", key, "", t),
            ("feedback", action, success, t),
            ("observe", key, action, success, t, f"{key} {action}"),
        ]
    return ops


EPISODES = st.lists(
    st.tuples(
        st.sampled_from(KEYS[:2]),
        st.sampled_from(VALUES),
        st.booleans(),
        st.integers(0, 9).map(lambda i: i == 0),
    ),
    max_size=60,
).map(_episodes)

# Small thresholds so that short streams reach promotions, revocations, evictions and clears.
SMALL = {
    "tepa_rev": {"n_min": 2, "W": 3, "m_rec": 2},
    "tepa_full": {"n_min": 2, "W": 3, "m_rec": 2, "max_trial_rounds": 1},
    "tepa_norev": {"n_min": 2},
    "sliding_window": {"n": 5, "steps": 10},
    "reactive": {"c": 1},
}
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _factory(name: str) -> Callable[[], Memory]:
    return lambda: build_memory(name, **SMALL.get(name, {}))


@pytest.mark.parametrize("name", memory_names())
def test_every_built_in_memory_passes_check_memory(name):
    check_memory(_factory(name), seed=1, streams=10)


@pytest.mark.parametrize("name", memory_names())
@PROPERTY
@given(ops=OPS)
def test_random_streams_keep_the_protocol(name, ops):
    check_stream(_factory(name), ops)


@pytest.mark.parametrize("name", memory_names())
@PROPERTY
@given(ops=EPISODES)
def test_agent_loop_streams_keep_the_protocol(name, ops):
    check_stream(_factory(name), ops)


@PROPERTY
@given(ops=OPS)
def test_no_memory_retrieves_nothing_and_last_write_wins_keeps_one_value_per_key(ops):
    empty, lww = build_memory("no_memory"), build_memory("lww")
    observed: set = set()
    for op in ops:
        if op[0] == "observe":
            _, key, value, holds, t, text = op
            for memory in (empty, lww):
                memory.observe(Observation(key, value, holds, t, text))
            observed.add(key)
        elif op[0] == "retrieve":
            query = Query(key=op[1], text=op[2], t=op[3])
            assert empty.retrieve(query) == []
            assert op[1] is None or len(lww.retrieve(query)) <= 1
        assert lww.snapshot()["active"] <= len(observed)


class Leaky:
    """Retrieves everything it was shown, whatever the key; the broken variants below each break one
    more property."""

    name = "leaky"

    def __init__(self) -> None:
        self.seen: list[Evidence] = []

    def observe(self, obs: Observation) -> None:
        self.seen.append(Evidence(obs.key, obs.value, obs.holds, obs.t, obs.text))

    def retrieve(self, query: Query) -> list[Evidence]:
        return list(self.seen)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        pass

    def on_phase_boundary(self, phase: str, t: int) -> None:
        pass

    def snapshot(self) -> dict:
        return {"active": len(self.seen)}


class Honest(Leaky):
    def retrieve(self, query: Query) -> list[Evidence]:
        return [e for e in self.seen if query.key is None or e.key == query.key]


class TupleRetrieval(Honest):
    def retrieve(self, query: Query) -> list[Evidence]:
        return tuple(super().retrieve(query))  # type: ignore[return-value]


class NegativeCount(Honest):
    def snapshot(self) -> dict:
        return {"active": -1}


class Shuffled(Honest):
    def retrieve(self, query: Query) -> list[Evidence]:
        found = super().retrieve(query)
        random.shuffle(found)
        return found


class RepeatsEvents(Honest):
    def drain_events(self) -> list[dict]:
        return [{"t": e.t, "event": "seen"} for e in self.seen]


class NoSnapshot:
    name = "no_snapshot"
    observe, retrieve, feedback, on_phase_boundary = (
        Honest.observe, Honest.retrieve, Honest.feedback, Honest.on_phase_boundary
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NoSnapshot, r"protocol: NoSnapshot lacks snapshot of tepa\.protocol\.Memory"),
        (Leaky, r"keyed retrieval: call \d+: retrieve\(Query\(key=.*\)\) returned evidence of key "),
        (TupleRetrieval, r"retrieve: call \d+: must return a list of tepa\.evidence\.Evidence, got tuple"),
        (
            NegativeCount,
            r"snapshot: call 0: counts must be non-negative ints keyed by name, got 'active': -1",
        ),
        (
            Shuffled,
            r"determinism: the same calls on a fresh .* at call \d+ \(retrieve\): what retrieve returned$",
        ),
        (RepeatsEvents, r"drain_events: call \d+: a second call right after the first returned events again"),
    ],
)
def test_check_memory_names_the_property_a_broken_memory_fails(cls, message):
    check_memory(Honest)  # the template itself passes
    with pytest.raises(MemoryCheckError, match=f"^memory check failed: {message}") as caught:
        check_memory(cls)
    assert "\n" not in str(caught.value)
