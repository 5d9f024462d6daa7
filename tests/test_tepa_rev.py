"""TEPA-Rev: promotion, revocation and re-promotion pinned to the observation where the numbers cross."""

from __future__ import annotations

import pytest

from tepa import Memory, Observation, Query, State, TEPARev
from tepa.retrieval.rank import DEFAULT_TOP_K

KEY = "door"


def see(m: TEPARev, t: int, value: str, holds: bool = True, key: object = KEY, text: str = ""):
    """Observe (key, value, holds) at t and return the precedent of (key, value), if any."""
    m.observe(Observation(key, value, holds, t, text or f"{key} opens with {value}", "test"))
    return m.lookup(key, value)


def events(p) -> list[tuple[int, str]]:
    return [(e.t, e.event) for e in p.history]


def test_implements_the_memory_protocol():
    m = TEPARev()
    assert isinstance(m, Memory)
    assert m.name == "tepa_rev"
    assert m.top_k == DEFAULT_TOP_K


def test_new_value_is_created_and_promoted_at_once_with_defaults():
    m = TEPARev()
    p = see(m, 0, "red")
    # s=1, f=0: m=(1+1)/(1+1+1+0)=2/3=0.667 > theta_pro=0.6 -> promoted by its creating observation
    assert (p.s, p.f, p.state) == (1, 0, State.ACTIVE)
    assert events(p) == [(0, "created"), (0, "promoted")]


def test_promotion_at_the_exact_crossing_not_at_equality():
    m = TEPARev(theta_pro=0.75)
    p = see(m, 0, "red")
    assert p.state is State.HYPOTHESIS  # s=1: m=2/3=0.667 <= 0.75
    see(m, 1, "red")
    assert p.state is State.HYPOTHESIS  # s=2: m=(1+2)/(2+2)=0.75, equal is not above
    see(m, 2, "red")
    assert p.state is State.ACTIVE  # s=3: m=(1+3)/(2+3)=0.8 > 0.75 -> promoted here
    assert events(p)[-1] == (2, "promoted")
    assert m.promotions == 1


def test_conflicting_evidence_delays_promotion():
    m = TEPARev(theta_pro=0.7)
    p = see(m, 0, "red")  # s=1, f=0: 2/3=0.667
    see(m, 1, "red", holds=False)  # s=1, f=1: 2/4=0.5
    see(m, 2, "red")  # s=2, f=1: 3/5=0.6
    see(m, 3, "red")  # s=3, f=1: 4/6=0.667
    assert p.state is State.HYPOTHESIS
    see(m, 4, "red")  # s=4, f=1: 5/7=0.714 > 0.7 -> promoted here
    assert p.state is State.ACTIVE and events(p)[-1] == (4, "promoted")


def test_posterior_revokes_at_the_exact_observation():
    m = TEPARev()
    a = see(m, 0, "red")
    see(m, 1, "red")  # a: s=2
    for t, f in zip(range(2, 5), (1, 2, 3), strict=True):
        b = see(m, t, "blue")  # a gets f += 1 (a key has one current value)
        assert (a.s, a.f) == (2, f)
        # f=1: 3/5=0.6; f=2: 3/6=0.5; f=3: 3/7=0.4286 >= 0.4 -> still active
        assert a.state is State.ACTIVE
    see(m, 5, "blue")
    # s=2, f=4: m=(1+2)/(2+6)=0.375 < 0.4 and s+f=6 >= n_min=3 -> revoked at this observation
    assert a.state is State.REVOKED
    assert events(a)[-1] == (5, "revoked")
    assert a.history[-1].reason.startswith("posterior:")
    assert "0.3750 < theta_rev=0.4" in a.history[-1].reason
    assert b.state is State.ACTIVE and m.revocations == 1


def test_posterior_rule_waits_for_n_min_and_equality_does_not_revoke():
    m = TEPARev(n_min=5)
    a = see(m, 0, "red")  # s=1
    see(m, 1, "red", holds=False)  # f=1: 2/4=0.5
    see(m, 2, "red", holds=False)  # f=2: 2/5=0.4, equal to theta_rev: not below
    assert a.state is State.ACTIVE
    see(m, 3, "red", holds=False)  # f=3: 2/6=0.333 < 0.4, but s+f=4 < n_min=5
    assert a.state is State.ACTIVE
    see(m, 4, "red", holds=False)  # f=4: s+f=5 >= 5 and 2/7=0.286 < 0.4 -> revoked here
    assert a.state is State.REVOKED and events(a)[-1] == (4, "revoked")


def test_failure_of_a_different_value_changes_nothing():
    m = TEPARev()
    a = see(m, 0, "red")
    assert see(m, 1, "blue", holds=False) is None  # no precedent is created from a failure
    assert (a.s, a.f, a.updated_t) == (1, 0, 0)
    assert len(m.precedents()) == 1


def _used(m: TEPARev, t: int):
    return m.retrieve(Query(KEY, "", t))


def test_recent_success_rule_revokes_at_the_exact_feedback():
    m = TEPARev()
    a = see(m, 0, "red")
    for t in range(1, 10):
        see(m, t, "red")  # s=10: the posterior rule cannot fire
    outcomes = [True, False, True, False]
    for t, ok in enumerate(outcomes, start=10):
        m.feedback(_used(m, t), ok, t)
    # [T,F,T] = 2/3 >= 0.5, then [T,F,T,F] = 2/4 = 0.5, equal is not below -> still active
    assert a.state is State.ACTIVE and list(a.recent) == outcomes
    m.feedback(_used(m, 14), False, 14)
    # [T,F,T,F,F] = 2/5 = 0.4 < theta_rec=0.5 with len 5 >= m_rec=3 -> revoked at this feedback
    assert a.state is State.REVOKED and events(a)[-1] == (14, "revoked")
    assert a.history[-1].reason.startswith("recent: 2/5")
    assert len(a.recent) == 0  # a revocation starts a clean epoch


def test_recent_rule_needs_m_rec_uses_and_slides_over_the_last_w():
    m = TEPARev(W=5, m_rec=3)
    a = see(m, 0, "red")
    for t in range(1, 10):
        see(m, t, "red")
    for t in range(10, 15):
        m.feedback(_used(m, t), True, t)
    m.feedback(_used(m, 15), False, 15)  # window [T,T,T,T,F] = 0.8
    m.feedback(_used(m, 16), False, 16)  # window [T,T,T,F,F] = 0.6
    assert a.state is State.ACTIVE
    m.feedback(_used(m, 17), False, 17)  # window [T,T,F,F,F] = 0.4 < 0.5 -> revoked here
    assert a.state is State.REVOKED and events(a)[-1] == (17, "revoked")

    m2 = TEPARev()
    b = see(m2, 0, "red")
    for t in range(1, 10):
        see(m2, t, "red")
    m2.feedback(_used(m2, 10), False, 10)
    m2.feedback(_used(m2, 11), False, 11)
    assert b.state is State.ACTIVE  # 0/2, but only 2 < m_rec=3 uses
    m2.feedback(_used(m2, 12), False, 12)
    assert b.state is State.REVOKED  # 0/3 < 0.5 with 3 uses


def test_feedback_only_counts_precedents_still_active():
    m = TEPARev()
    a = see(m, 0, "red")
    see(m, 1, "red")
    used = _used(m, 2)
    for t in range(2, 6):
        see(m, t, "blue")  # a revoked at t=5 (s=2, f=4)
    assert a.state is State.REVOKED
    m.feedback(used, False, 6)  # a was revoked after retrieval: its new epoch starts clean
    m.feedback([], True, 6)
    assert len(a.recent) == 0


def test_repromotion_when_the_old_regime_returns():
    m = TEPARev()
    a = see(m, 0, "red")
    see(m, 1, "red")
    for t in range(2, 9):
        see(m, t, "blue")  # a revoked at t=5; afterwards blue evidence is not counted on a
    assert a.state is State.REVOKED and (a.s, a.f) == (2, 4)
    assert m.archive.revoked() == [a]
    # The first regime returns. Since revocation: s=1, f=0: m=(1+1)/(2+1)=0.667 > 0.6 -> re-promoted now
    # (lifetime counts s=3, f=4 would give (1+3)/(2+7)=0.444: the epoch is what makes this possible).
    again = see(m, 9, "red")
    assert again is a and a.state is State.ACTIVE
    assert [e for e in events(a) if e[1] != "created"] == [(0, "promoted"), (5, "revoked"), (9, "repromoted")]
    assert a.history[-1].reason.startswith("revoked at t=5; epoch 1 evidence: m_epoch=(1+1)/(1+1+1+0)")
    assert m.repromotions == 1 and m.archive.revoked() == []
    assert len(m.precedents(KEY)) == 2  # never duplicated
    assert a in {m.lookup(KEY, e.value) for e in _used(m, 10)}


def test_repromotion_is_judged_on_evidence_since_revocation():
    m = TEPARev(theta_pro=0.7)
    a = see(m, 0, "red")
    see(m, 1, "red")  # s=2: (1+2)/(2+2)=0.75 > 0.7 -> promoted
    for t in range(2, 6):
        see(m, t, "blue")  # s=2, f=4: 3/8=0.375 < 0.4 -> revoked at t=5, epoch 1 starts
    see(m, 6, "red")  # since revocation s=1, f=0: 2/3=0.667, not above 0.7
    assert a.state is State.REVOKED
    see(m, 7, "red")  # s=2, f=0: 3/4=0.75 > 0.7 -> re-promoted here
    assert a.state is State.ACTIVE and events(a)[-1] == (7, "repromoted")
    assert (a.s, a.f, a.s_epoch, a.f_epoch, a.epoch) == (4, 4, 2, 0, 1)


def test_failure_while_revoked_reconfirms_the_revocation():
    m = TEPARev()
    a = see(m, 0, "red")
    see(m, 1, "red")
    for t in range(2, 6):
        see(m, t, "blue")  # revoked at t=5: epoch 1
    see(m, 6, "red")  # epoch 1: s=1, f=0 would re-promote; check it does, then revoke again
    assert a.state is State.ACTIVE
    for t in range(7, 12):
        see(m, t, "blue")  # epoch 1 s=1, f=3 at t=9: 2/6=0.333 < 0.4 -> revoked, epoch 2
    assert a.state is State.REVOKED and a.epoch == 2
    see(m, 12, "red", holds=False)  # tried and failed while revoked: epoch 3 starts, lifetime f counts it
    assert (a.f, a.s_epoch, a.f_epoch, a.epoch) == (8, 0, 0, 3)
    see(m, 13, "red")  # since the last failure s=1, f=0: 2/3=0.667 > 0.6 -> re-promoted at once
    assert a.state is State.ACTIVE and events(a)[-1] == (13, "repromoted")


def test_revoked_precedent_counts_only_evidence_about_its_own_value():
    m = TEPARev()
    a = see(m, 0, "red")
    see(m, 1, "blue")  # s=1, f=1: (1+1)/(2+2)=0.5
    see(m, 2, "blue")  # s=1, f=2: 2/5=0.4, not below
    see(m, 3, "blue")  # s=1, f=3: 2/6=0.333 < 0.4 -> revoked
    assert a.state is State.REVOKED
    before = (a.s, a.f, a.updated_t)
    see(m, 4, "blue")
    see(m, 5, "green", holds=False)
    assert (a.s, a.f, a.updated_t) == before == (1, 3, 3)
    see(m, 6, "red", holds=False)  # counted in the lifetime f; it re-confirms the revocation (new epoch)
    assert (a.s, a.f, a.f_epoch, a.epoch, a.updated_t) == (1, 4, 0, 2, 6)


def test_retrieve_returns_active_precedents_as_evidence():
    m = TEPARev()
    see(m, 0, "red", text="the red key opened it")
    see(m, 1, "red", text="red again")
    for t in range(2, 6):
        see(m, t, "blue", text=f"blue worked at {t}")
    b = m.lookup(KEY, "blue")
    (ev,) = m.retrieve(Query(KEY, "which key?", 6))  # red is revoked, only blue is retrievable
    assert (ev.key, ev.value, ev.holds, ev.t) == (KEY, "blue", True, 5)
    assert (ev.text, ev.source) == ("blue worked at 5", "test")  # the latest supporting observation
    assert (ev.ref, ev.support, ev.conflict) == (b.id, 4, 0)
    see(m, 6, "blue", holds=False)
    (ev,) = m.retrieve(Query(KEY, "", 7))
    assert (ev.t, ev.support, ev.conflict, ev.text) == (6, 4, 1, "blue worked at 5")
    assert m.retrieve(Query("window", "", 7)) == []


def test_retrieve_without_key_ranks_active_text_and_keeps_top_k():
    m = TEPARev(top_k=2)
    see(m, 0, "red", key="door", text="the front door opens with the red key")
    see(m, 1, "tea", key="drink", text="the guest drinks green tea")
    see(m, 2, "left", key="road", text="take the left road to the door")
    see(m, 3, "up", key="lift", text="press up in the lift")
    got = m.retrieve(Query(None, "how does the door open", 4))
    assert [e.key for e in got] == ["door", "road"]  # top 2 by BM25, then in chronological order
    for t in range(5, 9):
        see(m, t, "blue", key="door", text="the door needs a blue key now")
    assert m.lookup("door", "red").state is State.REVOKED
    got = {(e.key, e.value) for e in m.retrieve(Query(None, "door red key", 9))}
    assert ("door", "blue") in got and ("door", "red") not in got


def test_snapshot_and_phase_boundary():
    m = TEPARev()
    see(m, 0, "red")
    for t in range(1, 5):
        see(m, t, "blue")
    m.on_phase_boundary("reversal", 5)  # a no-op
    assert m.snapshot() == {
        "hypothesis": 0,
        "active": 1,
        "revoked": 1,
        "promotions": 2,
        "revocations": 1,
        "repromotions": 0,
        "trials": 0,
        "trial_passes": 0,
    }
    assert all(type(v) is int for v in m.snapshot().values())


def test_drain_events_is_a_flat_log_drained_once():
    m = TEPARev()
    user = ("user", 3)
    see(m, 0, "aisle", key=user)
    for t in (1, 2, 3):
        see(m, t, "aisle", key=user, holds=False)  # s=1, f=3: (1+1)/(2+4)=0.333 < 0.4 -> revoked at t=3
    log = m.drain_events()
    assert [(e["t"], e["event"], e["state"], e["s"], e["f"]) for e in log] == [
        (0, "created", "hypothesis", 1, 0),
        (0, "promoted", "active", 1, 0),
        (3, "revoked", "revoked", 1, 3),
    ]
    assert set(log[0]) == {"t", "event", "reason", "id", "key", "value", "s", "f", "state"}
    assert log[0]["key"] == "('user', 3)" and log[0]["value"] == "aisle"
    assert m.drain_events() == []


def test_archive_keeps_an_audit_record_of_revoked_precedents():
    m = TEPARev()
    a = see(m, 0, "red")
    for t in range(1, 4):
        see(m, t, "blue")  # s=1, f=3: 2/6 < 0.4 -> revoked at t=3
    assert a in m.archive and len(m.archive) == 1
    assert m.archive.revoked("door") == [a] and m.archive.revoked("window") == []
    (rec,) = m.archive.records()
    assert rec["id"] == a.id and rec["state"] == "revoked" and (rec["s"], rec["f"]) == (1, 3)
    assert [h["event"] for h in rec["history"]] == ["created", "promoted", "revoked"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("a0", 0),
        ("a0", -1.0),
        ("b0", 0.0),
        ("b0", float("nan")),
        ("n_min", 0),
        ("n_min", 2.5),
        ("theta_rev", -0.1),
        ("theta_pro", 1.5),
        ("theta_rec", float("inf")),
        ("W", 0),
        ("m_rec", 0),
        ("m_rec", 6),
        ("top_k", 0),
        ("top_k", True),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(name, value):
    with pytest.raises(ValueError, match=name):
        TEPARev(**{name: value})
