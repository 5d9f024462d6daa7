"""The five rule switches: each one's minimal stream shows what it changes, the literal preset, the
epoch on retrieved evidence, and the config keys that select them."""

from __future__ import annotations

import pytest

from runners.config import ConfigError
from tepa import Observation, Query, State, TEPAFull, TEPANoRev, TEPARev, TEPARevLiteral

SWITCH_KEYS = (
    "counts",
    "own_failure_new_epoch",
    "revoked_counts_conflicts",
    "clear_recent_on_revoke",
    "stale_feedback",
)


def run(m, stream: str) -> None:
    """Feed "a+ b+ a-" style tokens (value, + holds / - fails) on one key."""
    for t, token in enumerate(stream.split()):
        m.observe(Observation("k", token[:-1], token[-1] == "+", t))


def use(m, value: str, outcomes: list[bool]) -> None:
    for ok in outcomes:
        m.feedback([e for e in m.retrieve(Query("k")) if e.value == value], ok, 0)


@pytest.mark.parametrize(("counts", "state"), [("epoch", State.ACTIVE), ("lifetime", State.REVOKED)])
def test_counts_decides_what_the_posterior_revocation_rule_reads(counts, state):
    m = TEPARev(counts=counts)
    run(m, "a+ b+ b+ a- a- a+")
    a = m.lookup("k", "a")
    assert a.state is state and (a.s, a.f) == (2, 4)


@pytest.mark.parametrize(("new_epoch", "state"), [(True, State.ACTIVE), (False, State.REVOKED)])
def test_own_failure_new_epoch_restarts_the_evidence_since_revocation(new_epoch, state):
    m = TEPARev(own_failure_new_epoch=new_epoch)
    run(m, "a+ b+ a- b+ a- a+")
    assert m.lookup("k", "a").state is state


@pytest.mark.parametrize(("counted", "state"), [(False, State.ACTIVE), (True, State.REVOKED)])
def test_revoked_counts_conflicts_decides_whether_a_revoked_precedent_counts_other_values(counted, state):
    m = TEPARev(revoked_counts_conflicts=counted)
    run(m, "a+ c+ c+ c+ c+ a+")
    a = m.lookup("k", "a")
    assert a.state is state and a.f == (4 if counted else 3)


@pytest.mark.parametrize(("clear", "state"), [(True, State.ACTIVE), (False, State.REVOKED)])
def test_clear_recent_on_revoke_decides_whether_old_uses_follow_a_repromotion(clear, state):
    m = TEPARev(clear_recent_on_revoke=clear)
    run(m, "a+")
    use(m, "a", [True, False, False])
    a = m.lookup("k", "a")
    assert a.state is State.REVOKED
    run(m, "a+")
    # kept window [ok, fail, fail]: re-promoted and revoked again within the same update
    assert a.state is state and m.repromotions == 1


@pytest.mark.parametrize(
    ("mode", "window_after_revocation", "state_after_repromotion"),
    [("same_epoch", [], State.ACTIVE), ("active_only", [], State.REVOKED), ("count", [False], State.REVOKED)],
)
def test_stale_feedback_decides_where_feedback_from_before_a_revocation_lands(
    mode, window_after_revocation, state_after_repromotion
):
    m = TEPARev(stale_feedback=mode)
    run(m, "a+")
    stale = m.retrieve(Query("k"))
    assert [e.epoch for e in stale] == [0]
    run(m, "b+ b+ b+")  # a revoked: epoch 1
    m.feedback(stale, False, 10)
    a = m.lookup("k", "a")
    assert a.state is State.REVOKED and list(a.recent) == window_after_revocation
    run(m, "a+")  # re-promoted in epoch 1
    assert a.state is State.ACTIVE and m.retrieve(Query("k"))[0].epoch == 1
    for t in (11, 12, 13):
        m.feedback(stale, False, t)
    assert a.state is state_after_repromotion


def test_a_long_other_regime_delays_repromotion_only_under_the_literal_rules():
    """10 a's, then 100 b's, then a's: the default brings a back after one observation; the rules read
    literally need 127 (the conflicts counted while revoked must be outweighed)."""
    needed = {}
    for m in (TEPARev(), TEPARevLiteral()):
        run(m, " ".join(["a+"] * 10 + ["b+"] * 100))
        a = m.lookup("k", "a")
        assert a.state is State.REVOKED
        n = 0
        while a.state is not State.ACTIVE:
            run(m, "a+")
            n += 1
        needed[m.name] = n
    assert needed == {"tepa_rev": 1, "tepa_rev_literal": 127}


def test_the_literal_preset_is_tepa_rev_with_the_switches_read_literally():
    literal, default = TEPARevLiteral(), TEPARev()
    assert [getattr(literal, k) for k in SWITCH_KEYS] == ["lifetime", False, True, False, "active_only"]
    assert [getattr(default, k) for k in SWITCH_KEYS] == ["epoch", True, False, True, "same_epoch"]
    assert isinstance(literal, TEPARev) and literal.name == "tepa_rev_literal"
    assert TEPARevLiteral(counts="epoch").counts == "epoch"


@pytest.mark.parametrize("cls", [TEPARev, TEPAFull, TEPANoRev, TEPARevLiteral])
def test_every_variant_takes_the_five_switches(cls):
    m = cls(
        counts="lifetime",
        own_failure_new_epoch=False,
        revoked_counts_conflicts=True,
        clear_recent_on_revoke=False,
        stale_feedback="count",
    )
    assert [getattr(m, k) for k in SWITCH_KEYS] == ["lifetime", False, True, False, "count"]


def test_no_rev_ignores_the_switches():
    streams = "a+ b+ b+ a- a- a+ c+ c+ a+ b-"
    results = []
    for kw in ({}, {"counts": "lifetime", "revoked_counts_conflicts": True, "stale_feedback": "count"}):
        m = TEPANoRev(**kw)
        run(m, streams)
        results.append([(p.value, p.state, p.s, p.f) for p in m.precedents()])
    assert results[0] == results[1]


@pytest.mark.parametrize("memory", ["tepa_rev", "tepa_full", "tepa_norev"])
def test_the_switches_are_config_keys_of_every_variant(compose, memory):
    spec = compose(f"memory={memory}", "memory.counts=lifetime", "memory.stale_feedback=active_only")
    built = spec.memory.build()
    assert (built.counts, built.stale_feedback, built.clear_recent_on_revoke) == (
        "lifetime",
        "active_only",
        True,
    )


def test_memory_tepa_rev_literal_is_labelled_and_built_with_the_literal_switches(compose):
    spec = compose("memory=tepa_rev_literal")
    assert spec.memory.label == "tepa_rev_literal"
    built = spec.memory.build()
    assert isinstance(built, TEPARevLiteral) and built.revoked_counts_conflicts is True


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("memory.counts=epochs", "memory.counts='epochs': must be one of epoch, lifetime"),
        ("memory.stale_feedback=never", "memory.stale_feedback='never': must be one of same_epoch"),
        ("memory.theta_pro=0.4", "memory.theta_pro=0.4: must be >= the prior mean a0/(a0+b0)=0.5"),
        ("memory.own_failure_new_epoch=maybe", "memory.own_failure_new_epoch='maybe': wrong type"),
    ],
)
def test_a_bad_switch_or_a_prior_above_theta_pro_stops_the_run_naming_the_key(compose, override, message):
    with pytest.raises(ConfigError) as err:
        compose(override)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
