"""Invariants of the TEPA lifecycle on random streams and random (valid) thresholds."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tepa import Observation, Query, State, TEPAFull, TEPANoRev, TEPARev, check_memory

KEYS = ("k0", "k1", ("user", 2))
VALUES = ("a", "b", "c")

observe_op = st.tuples(st.just("observe"), st.sampled_from(KEYS), st.sampled_from(VALUES), st.booleans())
retrieve_op = st.tuples(st.just("retrieve"), st.sampled_from((*KEYS, None)), st.sampled_from(VALUES))
feedback_op = st.tuples(st.just("feedback"), st.booleans())
streams = st.lists(st.one_of(observe_op, observe_op, retrieve_op, feedback_op), max_size=80)


UNIT = (0.0, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 2 / 3, 0.75, 1.0)


@st.composite
def thresholds(draw) -> dict:
    """Any valid setting: thresholds anywhere in [0, 1] (theta_rev may exceed theta_pro) with the prior
    mean a0 / (a0 + b0) <= theta_pro, and every rule switch."""
    w = draw(st.integers(1, 6))
    a0 = draw(st.sampled_from((0.5, 1.0, 2.0)))
    b0 = draw(st.sampled_from((0.5, 1.0, 2.0)))
    return {
        "a0": a0,
        "b0": b0,
        "n_min": draw(st.integers(1, 5)),
        "theta_rev": draw(st.sampled_from(UNIT)),
        "theta_pro": draw(st.sampled_from([x for x in UNIT if x >= a0 / (a0 + b0)])),
        "theta_rec": draw(st.sampled_from(UNIT)),
        "W": w,
        "m_rec": draw(st.integers(1, w)),
        "top_k": draw(st.integers(1, 4)),
        "counts": draw(st.sampled_from(("epoch", "lifetime"))),
        "own_failure_new_epoch": draw(st.booleans()),
        "revoked_counts_conflicts": draw(st.booleans()),
        "clear_recent_on_revoke": draw(st.booleans()),
        "stale_feedback": draw(st.sampled_from(("same_epoch", "active_only", "count"))),
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
    check_rules_hold(m)


def check_rules_hold(m) -> None:
    """The stated conditions after an update: no active precedent meets a revocation condition, and no
    hypothesis or revoked precedent meets the promotion condition on its evidence since creation or
    revocation (in TEPA-Full, unless a failed trial round of this epoch holds it)."""
    for p in m.precedents():
        if p.state is State.ACTIVE and m.revokes:
            s, f = (p.s, p.f) if m.counts == "lifetime" else (p.s_epoch, p.f_epoch)
            posterior = s + f >= m.n_min and (m.a0 + s) / (m.a0 + m.b0 + s + f) < m.theta_rev
            recent = len(p.recent) >= m.m_rec and sum(p.recent) / len(p.recent) < m.theta_rec
            assert not posterior and not recent, p
        elif p.state is not State.ACTIVE:
            due = (m.a0 + p.s_epoch) / (m.a0 + m.b0 + p.s_epoch + p.f_epoch) > m.theta_pro
            assert not due or (isinstance(m, TEPAFull) and p.trial_rounds > 0), p


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
    "counts": ("epochs", 1, None),
    "stale_feedback": ("never", True),
    "own_failure_new_epoch": (1, "yes"),
    "revoked_counts_conflicts": (0, None),
    "clear_recent_on_revoke": ("false",),
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


@pytest.mark.parametrize("cls", [TEPARev, TEPAFull, TEPANoRev])
def test_a_prior_mean_above_theta_pro_is_refused_naming_the_keys(cls):
    with pytest.raises(ValueError, match=r"theta_pro=0.4: must be >= the prior mean a0/\(a0\+b0\)=0.5"):
        cls(theta_pro=0.4)
    cls(theta_pro=0.5)  # equality is fine: promotion needs m > theta_pro


@pytest.mark.parametrize("variant", ["rev", "full"])
@settings(max_examples=150, deadline=None, derandomize=True)
@given(params=thresholds(), seed=st.integers(0, 2**32 - 1), trial_answers=st.lists(st.booleans(), max_size=7))
def test_stated_conditions_hold_after_every_update_for_random_thresholds(
    variant, params, seed, trial_answers
):
    """Long dense streams on two values of one key, where transitions follow each other closely."""
    rng = random.Random(seed)
    m = build(variant, params, trial_answers)
    used = []
    for t in range(150):
        if rng.random() < 0.6:
            m.observe(Observation("k", rng.choice("ab"), rng.random() < 0.8, t))
        elif rng.random() < 0.5:
            used = m.retrieve(Query("k"))
        else:
            m.feedback(used, rng.random() < 0.5, t)
        check_rules_hold(m)


@pytest.mark.parametrize("variant", ["rev", "full", "norev"])
@settings(max_examples=25, deadline=None, derandomize=True)
@given(params=thresholds(), trial_answers=st.lists(st.booleans(), max_size=7))
def test_every_valid_setting_passes_check_memory(variant, params, trial_answers):
    check_memory(lambda: build(variant, params, trial_answers), streams=2)
