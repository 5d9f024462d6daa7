"""Property tests over every registered memory method (TEPA variants and baselines alike): random
streams of observe / retrieve / feedback / phase-boundary calls must never crash and must keep the
protocol's invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runners.registry import build_memory, memory_names
from tepa.evidence import Evidence, Observation, Query

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


def _trial(precedent, kind: str) -> bool:
    """A deterministic stand-in for `Environment.trial`."""
    return kind != "counterfactual" and len(str(precedent.value)) % 2 == 1


def _build(name: str):
    memory = build_memory(name, **SMALL.get(name, {}))
    if hasattr(memory, "set_trial"):
        memory.set_trial(_trial)
    return memory


def _check_snapshot(memory) -> None:
    snap = memory.snapshot()
    for state in ("hypothesis", "active", "revoked"):
        assert type(snap[state]) is int and snap[state] >= 0, (state, snap)


def _run(name: str, ops) -> None:
    memory = _build(name)
    last: list[Evidence] = []
    keys_observed: set = set()
    for op in ops:
        kind = op[0]
        if kind == "observe":
            _, key, value, holds, t, text = op
            memory.observe(Observation(key, value, holds, t, text))
            keys_observed.add(key)
        elif kind == "retrieve":
            _, key, text, t = op
            last = memory.retrieve(Query(key=key, text=text, t=t))
            assert isinstance(last, list) and all(isinstance(e, Evidence) for e in last)
            if key is not None:
                assert all(e.key == key for e in last)
            if name == "no_memory":
                assert last == []
            if name == "lww" and key is not None:
                assert len(last) <= 1
        elif kind == "feedback":
            _, action, success, t = op
            memory.feedback([e for e in last if e.value == action], success, t)
        else:
            memory.on_phase_boundary("next", op[1])
        _check_snapshot(memory)
        if name == "lww":
            assert memory.snapshot()["active"] <= len(keys_observed)


@pytest.mark.parametrize("name", memory_names())
@PROPERTY
@given(ops=OPS)
def test_random_streams_keep_the_protocol(name, ops):
    _run(name, ops)


@pytest.mark.parametrize("name", memory_names())
@PROPERTY
@given(ops=EPISODES)
def test_agent_loop_streams_keep_the_protocol(name, ops):
    _run(name, ops)


@pytest.mark.parametrize("name", memory_names())
def test_keyed_retrieval_after_many_keys_returns_only_that_key(name):
    memory = _build(name)
    for t in range(60):
        memory.observe(Observation(t % 6, VALUES[t % 3], holds=t % 4 != 0, t=t, text=f"item {t % 6}"))
    for key in range(6):
        assert all(e.key == key for e in memory.retrieve(Query(key=key, t=60)))
    _check_snapshot(memory)
