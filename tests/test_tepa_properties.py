"""Invariants of the TEPA lifecycle on random streams and random (valid) thresholds."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tepa import Observation, Query, State, TEPAFull, TEPANoRev, TEPARev

KEYS = ("k0", "k1", ("user", 2))
VALUES = ("a", "b", "c")

observe_op = st.tuples(st.just("observe"), st.sampled_from(KEYS), st.sampled_from(VALUES), st.booleans())
retrieve_op = st.tuples(st.just("retrieve"), st.sampled_from((*KEYS, None)), st.sampled_from(VALUES))
feedback_op = st.tuples(st.just("feedback"), st.booleans())
streams = st.lists(st.one_of(observe_op, observe_op, retrieve_op, feedback_op), max_size=80)


@st.composite
def thresholds(draw) -> dict:
    unit = st.sampled_from((0.0, 0.3, 0.4, 0.5, 0.6, 2 / 3, 0.75, 1.0))
    w = draw(st.integers(1, 6))
    return {
        "a0": draw(st.sampled_from((0.5, 1.0, 2.0))),
        "b0": draw(st.sampled_from((0.5, 1.0, 2.0))),
        "n_min": draw(st.integers(1, 5)),
        "theta_rev": draw(unit),
        "theta_pro": draw(unit),
        "theta_rec": draw(unit),
        "W": w,
        "m_rec": draw(st.integers(1, w)),
        "top_k": draw(st.integers(1, 4)),
    }


def build(variant: str, params: dict, trial_answers: list[bool]):
    if variant == "full":
        answers = itertools.cycle(trial_answers or [True])
        return TEPAFull(trial_fn=lambda p, kind: next(answers), max_trial_rounds=2, **params)
    return {"rev": TEPARev, "norev": TEPANoRev}[variant](**params)


def check_invariants(m, previous: dict) -> None:
    ps = m.precedents()
    by_state = {s: [p for p in ps if p.state is s] for s in State}
    snap = m.snapshot()
    # every precedent is in exactly one state, and the counts agree with the snapshot and the archive
    assert sum(len(v) for v in by_state.values()) == len(ps)
    assert [snap["hypothesis"], snap["active"], snap["revoked"]] == [len(by_state[s]) for s in State]
    assert m.archive.revoked() == by_state[State.REVOKED]
    # one precedent per (key, value), ids unique
    assert len({(str(p.key), p.value) for p in ps}) == len(ps) == len({p.id for p in ps})
    for p in ps:
        s, f = previous.get(p.id, (0, 0))
        assert p.s >= s and p.f >= f  # lifetime counts never decrease
        assert 0 <= p.s_epoch <= p.s and 0 <= p.f_epoch <= p.f
        assert len(p.recent) <= m.W
        assert p.history[0].event == "created"
        transitions = [e.event for e in p.history if e.event in ("promoted", "revoked", "repromoted")]
        last = transitions[-1] if transitions else "created"
        expected = {"created": State.HYPOTHESIS, "promoted": State.ACTIVE, "repromoted": State.ACTIVE}
        assert p.state is expected.get(last, State.REVOKED)
        previous[p.id] = (p.s, p.f)
    if isinstance(m, TEPANoRev):
        assert not by_state[State.REVOKED] and snap["revocations"] == 0 == snap["repromotions"]


@pytest.mark.parametrize("variant", ["rev", "full", "norev"])
@settings(max_examples=120, deadline=None, derandomize=True)
@given(ops=streams, params=thresholds(), trial_answers=st.lists(st.booleans(), max_size=7))
def test_lifecycle_invariants_on_random_streams(variant, ops, params, trial_answers):
    m = build(variant, params, trial_answers)
    previous: dict[int, tuple[int, int]] = {}
    used = []
    for t, op in enumerate(ops):
        if op[0] == "observe":
            m.observe(Observation(op[1], op[2], op[3], t, f"{op[1]} {op[2]}"))
        elif op[0] == "retrieve":
            used = m.retrieve(Query(op[1], f"{op[1]} {op[2]}", t))
            for ev in used:  # retrieval never returns a hypothesis or a revoked precedent
                p = m.precedents()[ev.ref]
                assert p.state is State.ACTIVE and (ev.key, ev.value) == (p.key, p.value)
                assert (ev.support, ev.conflict) == (p.s, p.f)
            if op[1] is None:
                assert len(used) <= m.top_k
        else:
            m.feedback(used, op[1], t)
        check_invariants(m, previous)
    events = m.drain_events()
    assert len(events) == sum(len(p.history) for p in m.precedents())
    snap = m.snapshot()
    counted = {e: sum(1 for x in events if x["event"] == e) for e in ("promoted", "revoked", "repromoted")}
    assert (snap["promotions"], snap["revocations"], snap["repromotions"]) == tuple(counted.values())
    assert snap["trials"] == sum(1 for x in events if x["event"] == "trial")


BAD_VALUES = {
    "a0": (0, -0.5, float("nan"), "1"),
    "b0": (0.0, -2, float("inf")),
    "n_min": (0, -1, 1.5, True),
    "theta_rev": (-0.01, 1.01, float("nan")),
    "theta_pro": (-1, 2.0, None),
    "theta_rec": (1.5, -0.2),
    "W": (0, 2.0, False),
    "m_rec": (0, 99),
    "top_k": (0, -3, 1.0),
}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    cls=st.sampled_from((TEPARev, TEPAFull, TEPANoRev)),
    name_value=st.sampled_from([(n, v) for n, vs in BAD_VALUES.items() for v in vs]),
)
def test_bad_constructor_values_raise_value_error_naming_the_parameter(cls, name_value):
    name, value = name_value
    with pytest.raises(ValueError, match=name):
        cls(**{name: value})
