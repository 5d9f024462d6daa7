"""TEPA-NoRev: the same promotion as TEPA-Rev, and nothing is ever revoked."""

from __future__ import annotations

from tepa import Memory, Observation, Query, State, TEPANoRev, TEPARev

KEY = "door"


def see(m, t: int, value: str, holds: bool = True):
    m.observe(Observation(KEY, value, holds, t, f"{KEY} opens with {value}", "test"))
    return m.lookup(KEY, value)


def test_implements_the_memory_protocol():
    m = TEPANoRev()
    assert isinstance(m, Memory) and m.name == "tepa_norev"


def test_promotion_matches_tepa_rev():
    for cls in (TEPARev, TEPANoRev):
        m = cls(theta_pro=0.75)
        p = see(m, 0, "red")  # 2/3
        see(m, 1, "red")  # 3/4 = 0.75, not above
        assert p.state is State.HYPOTHESIS
        see(m, 2, "red")  # 4/5 = 0.8 -> promoted
        assert p.state is State.ACTIVE and p.history[-1].t == 2


def test_conflicting_precedents_stay_active_side_by_side():
    rev, norev = TEPARev(), TEPANoRev()
    for m in (rev, norev):
        see(m, 0, "red")
        see(m, 1, "red")
        for t in range(2, 12):
            see(m, t, "blue")
        for t in range(12, 17):
            see(m, t, "red", holds=False)
            used = [e for e in m.retrieve(Query(KEY, "", t)) if e.value == "red"]
            m.feedback(used, False, t)
    assert rev.lookup(KEY, "red").state is State.REVOKED  # the same stream revokes red in TEPA-Rev
    red = norev.lookup(KEY, "red")
    assert red.state is State.ACTIVE and (red.s, red.f) == (2, 15) and list(red.recent) == [False] * 5
    assert [e.value for e in norev.retrieve(Query(KEY, "", 17))] == ["blue", "red"]
    snap = norev.snapshot()
    assert (snap["active"], snap["revoked"], snap["revocations"]) == (2, 0, 0)
    assert "revoked" not in {e["event"] for e in norev.drain_events()}
