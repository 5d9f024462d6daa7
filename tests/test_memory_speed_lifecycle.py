"""The lifecycle's shortcuts on a fact stream's hot path keep what it logs and keeps: reasons remembered
per counts read as formatted afresh (per memory, for its own thresholds), a precedent's recent-use window
exists from its first use on, and a subclass's promotion gate is still asked."""

from __future__ import annotations

import random
from collections import deque

import pytest

from tepa import Evidence, LifecycleEvent, Observation, Precedent, Query, TEPARev


def expected_reason(event: dict, m: TEPARev) -> str | None:
    """The reason of a first promotion or a first posterior revocation, formatted here from the event's
    lifetime counts (a precedent's first epoch counts everything); None for other events."""
    s, f = event["s"], event["f"]
    which = "" if m.counts == "lifetime" else "_epoch"
    if event["event"] == "promoted":
        which = "_epoch"
    mean = (m.a0 + s) / (m.a0 + m.b0 + s + f)
    rule = f"m{which}=({m.a0:g}+{s})/({m.a0:g}+{m.b0:g}+{s}+{f})={mean:.4f}"
    if event["event"] == "promoted":
        return f"{rule} > theta_pro={m.theta_pro:g}"
    if event["event"] == "revoked" and event["reason"].startswith("posterior"):
        counted = f"s{which}+f{which}={s}+{f} >= n_min={m.n_min}"
        return f"posterior: {counted} and {rule} < theta_rev={m.theta_rev:g}"
    return None


def first_epoch_events(memory: TEPARev, rng: random.Random, start: int, revoked: set[int]) -> list[dict]:
    """The events of precedents before their first revocation (`revoked`: the ids revoked so far), on
    400 steps from `start` of a random stream of 40 keys."""
    events = []
    for t in range(start, start + 400):
        key, value = rng.randrange(40), rng.choice("xyz")
        memory.observe(Observation(key, value, rng.random() < 0.7, t))
        for event in memory.drain_events():
            if event["id"] not in revoked:
                events.append(event)
            if event["event"] == "revoked":
                revoked.add(event["id"])
    return events


@pytest.mark.parametrize("counts", ["epoch", "lifetime"])
def test_reasons_remembered_per_counts_read_as_formatted_afresh_for_each_memorys_thresholds(counts):
    rng = random.Random(7)
    memories = [
        TEPARev(counts=counts, theta_rev=0.4, n_min=2),
        TEPARev(counts=counts, a0=2.0, b0=3.0, theta_pro=0.45, theta_rev=0.35, n_min=3),
    ]
    revoked: list[set[int]] = [set(), set()]
    checked = {"promoted": 0, "revoked": 0}
    for start in range(0, 1200, 400):
        # in turns, so that a text one memory keeps is never taken for the other's
        for memory, ids in zip(memories, revoked, strict=True):
            for event in first_epoch_events(memory, rng, start, ids):
                expected = expected_reason(event, memory)
                if expected is not None:
                    assert event["reason"] == expected
                    checked[event["event"]] += 1
    assert min(checked.values()) > 100


def test_a_precedent_gets_its_recent_window_at_its_first_use_and_loses_it_at_revocation():
    memory = TEPARev(W=4, m_rec=2, theta_rec=0.5)
    memory.observe(Observation("k", "v", True, 0))
    (p,) = memory.precedents()
    assert p.recent == () and p.record()["recent"] == []
    (used,) = memory.retrieve(Query("k"))
    for t in range(1, 4):
        memory.feedback([used], True, t)
    assert isinstance(p.recent, deque) and p.recent.maxlen == 4 and list(p.recent) == [True] * 3
    memory.feedback([used], False, 4)
    memory.feedback([used], False, 5)
    memory.feedback([used], False, 6)
    assert p.history[-1].reason.startswith("recent: 1/4") and len(p.recent) == 0


def test_a_kept_window_stays_with_a_revoked_precedent():
    memory = TEPARev(W=3, m_rec=2, clear_recent_on_revoke=False)
    memory.observe(Observation("k", "v", True, 0))
    (used,) = memory.retrieve(Query("k"))
    memory.feedback([used], False, 1)
    memory.feedback([used], False, 2)
    (p,) = memory.precedents()
    assert p.state == "revoked" and list(p.recent) == [False, False]


class Gated(TEPARev):
    """Promotes a value only once told it may, and says so in the reason."""

    def __init__(self) -> None:
        super().__init__()
        self.allowed: set[str] = set()

    def _admit(self, p: Precedent, t: int) -> str | None:
        return "; allowed" if p.value in self.allowed else None


def test_a_subclass_gate_is_asked_before_every_promotion():
    memory = Gated()
    for t in range(3):
        memory.observe(Observation("k", "v", True, t))
    assert memory.retrieve(Query("k")) == []
    memory.allowed.add("v")
    memory.observe(Observation("k", "v", True, 3))
    (found,) = memory.retrieve(Query("k"))
    assert isinstance(found, Evidence) and found.value == "v"
    assert memory.precedents()[0].history[-1].reason.endswith("> theta_pro=0.6; allowed")


def test_history_reads_as_lifecycle_events_and_a_repromotion_names_the_latest_revocation():
    memory = TEPARev(n_min=2, theta_rev=0.55)  # one newer conflicting fact revokes
    for t, value in enumerate(["red", "blue", "red", "blue", "red"]):
        memory.observe(Observation("k", value, True, t))
    red = memory.lookup("k", "red")
    history = red.history
    assert all(isinstance(e, LifecycleEvent) for e in history)
    assert [(e.t, e.event) for e in history] == [
        (0, "created"), (0, "promoted"), (1, "revoked"), (2, "repromoted"), (3, "revoked"), (4, "repromoted")
    ]  # fmt: skip
    assert history[-1].reason.startswith("revoked at t=3; epoch 2 evidence:")
    assert red.record()["history"][2] == {"t": 1, "event": "revoked", "reason": history[2].reason}
    history.clear()  # a new list each time: the precedent's own is untouched
    assert len(red.history) == 6
