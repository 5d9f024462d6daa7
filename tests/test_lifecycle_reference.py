"""An independent, deliberately plain model of TEPA's documented rules, replayed event by event against
the engine (`tepa`) on random streams, for random valid thresholds and every combination of the five
rule switches.

The model is written from the rule text (README, "TEPA variants and the audit archive"; the switches as
documented on `tepa.TEPARev`), not from the engine's code: it keeps every claim in a list, recounts
nothing incrementally it does not have to, and after every update applies the rules to every claim of
the touched key until nothing changes. After every event the test compares what is retrieved, every
claim's counts, window, state and epoch, and the state counts.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from tepa import Evidence, Observation, Query, TEPANoRev, TEPARev


@dataclass
class Claim:
    id: int
    key: str
    value: str
    state: str = "hypothesis"
    s: int = 0  # lifetime support
    f: int = 0  # lifetime conflicts
    since_s: int = 0  # support since creation / revocation (/ own failure while revoked)
    since_f: int = 0
    epoch: int = 0
    window: list[bool] = field(default_factory=list)
    ever_revoked: bool = False


class Reference:
    def __init__(self, revokes: bool, p: dict) -> None:
        self.revokes = revokes
        self.p = p
        self.claims: list[Claim] = []
        self.promotions = self.revocations = self.repromotions = 0

    def mean(self, s: int, f: int) -> float:
        return (self.p["a0"] + s) / (self.p["a0"] + self.p["b0"] + s + f)

    def must_revoke(self, c: Claim) -> bool:
        p = self.p
        if p["counts"] == "lifetime":
            s, f = c.s, c.f
        else:
            s, f = c.since_s, c.since_f
        if s + f >= p["n_min"] and self.mean(s, f) < p["theta_rev"]:
            return True
        return len(c.window) >= p["m_rec"] and sum(c.window) / len(c.window) < p["theta_rec"]

    def may_promote(self, c: Claim) -> bool:
        return self.mean(c.since_s, c.since_f) > self.p["theta_pro"]

    def restart(self, c: Claim) -> None:
        c.since_s = c.since_f = 0
        c.epoch += 1

    def settle(self, key: str) -> None:
        changed = True
        while changed:
            changed = False
            for c in self.claims:
                if c.key != key:
                    continue
                if c.state == "active" and self.revokes and self.must_revoke(c):
                    c.state = "revoked"
                    c.ever_revoked = True
                    self.revocations += 1
                    self.restart(c)
                    if self.p["clear_recent_on_revoke"]:
                        c.window = []
                    changed = True
                elif c.state != "active" and self.may_promote(c):
                    if c.state == "hypothesis":
                        self.promotions += 1
                    else:
                        self.repromotions += 1
                    c.state = "active"
                    changed = True

    def observe(self, key: str, value: str, holds: bool) -> None:
        own = None
        for c in self.claims:
            if c.key != key:
                continue
            if c.value == value:
                own = c
                if holds:
                    c.s += 1
                    c.since_s += 1
                else:
                    c.f += 1
                    c.since_f += 1
                    if c.state == "revoked" and self.p["own_failure_new_epoch"]:
                        self.restart(c)
            elif holds and (c.state != "revoked" or self.p["revoked_counts_conflicts"]):
                c.f += 1
                c.since_f += 1
        if own is None and holds:
            self.claims.append(Claim(len(self.claims), key, value, s=1, since_s=1))
        self.settle(key)

    def retrieve(self, key: str) -> list[tuple]:
        return sorted(
            (c.id, c.value, c.s, c.f, c.epoch) for c in self.claims if c.key == key and c.state == "active"
        )

    def feedback(self, used: list[tuple], success: bool) -> None:
        mode = self.p["stale_feedback"]
        for ref, _, _, _, epoch in used:
            c = self.claims[ref]
            if mode == "same_epoch" and c.epoch != epoch:
                continue
            if mode == "active_only" and c.state != "active":
                continue
            c.window = (c.window + [success])[-self.p["W"] :]
        for key in {self.claims[u[0]].key for u in used}:
            self.settle(key)

    def states(self) -> dict[str, int]:
        return {s: sum(c.state == s for c in self.claims) for s in ("hypothesis", "active", "revoked")}


SWITCHES = list(
    itertools.product(
        ("epoch", "lifetime"),
        (True, False),
        (True, False),
        (True, False),
        ("same_epoch", "active_only", "count"),
    )
)
UNIT = (0.0, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 2 / 3, 0.75, 0.9, 1.0)


def random_params(rng: random.Random, switches: tuple) -> dict:
    a0, b0 = rng.choice((0.5, 1.0, 2.0)), rng.choice((0.5, 1.0, 2.0))
    w = rng.randint(1, 5)
    counts, own_failure, revoked_conflicts, clear_recent, stale = switches
    return {
        "a0": a0,
        "b0": b0,
        "n_min": rng.randint(1, 4),
        "theta_rev": rng.choice(UNIT),
        "theta_pro": rng.choice([x for x in UNIT if x >= a0 / (a0 + b0)]),
        "theta_rec": rng.choice(UNIT),
        "W": w,
        "m_rec": rng.randint(1, w),
        "counts": counts,
        "own_failure_new_epoch": own_failure,
        "revoked_counts_conflicts": revoked_conflicts,
        "clear_recent_on_revoke": clear_recent,
        "stale_feedback": stale,
    }


def as_tuple(ev: Evidence) -> tuple:
    return (ev.ref, ev.value, ev.support, ev.conflict, ev.epoch)


def assert_same(engine, ref: Reference) -> None:
    snap = engine.snapshot()
    assert {s: snap[s] for s in ("hypothesis", "active", "revoked")} == ref.states()
    assert (snap["promotions"], snap["revocations"], snap["repromotions"]) == (
        ref.promotions,
        ref.revocations,
        ref.repromotions,
    )
    got = [
        (p.id, p.key, p.value, p.state.value, p.s, p.f, p.s_epoch, p.f_epoch, p.epoch, list(p.recent))
        for p in engine.precedents()
    ]
    want = [
        (c.id, c.key, c.value, c.state, c.s, c.f, c.since_s, c.since_f, c.epoch, c.window) for c in ref.claims
    ]
    assert got == want


def replay(cls, revokes: bool, switches: tuple, seed: int, n_events: int = 100) -> int:
    rng = random.Random(seed)
    params = random_params(rng, switches)
    engine, ref = cls(**params), Reference(revokes, params)
    keys, values = ("k0", "k1"), ("a", "b", "c")
    handed_out: list[tuple[list[Evidence], list[tuple]]] = []  # every retrieval so far, fed back later too
    for t in range(n_events):
        roll = rng.random()
        if roll < 0.6:
            key, value, holds = rng.choice(keys), rng.choice(values), rng.random() < 0.7
            engine.observe(Observation(key, value, holds, t))
            ref.observe(key, value, holds)
        elif roll < 0.8:
            key = rng.choice(keys)
            got = engine.retrieve(Query(key, "", t))
            assert sorted(map(as_tuple, got)) == ref.retrieve(key)
            handed_out.append((got, ref.retrieve(key)))
        elif handed_out:  # feedback on the latest retrieval, or (stale) on an older one
            got, want = handed_out[-1] if rng.random() < 0.6 else rng.choice(handed_out)
            success = rng.random() < 0.5
            engine.feedback(got, success, t)
            ref.feedback(want, success)
        assert_same(engine, ref)
    return len(ref.claims)


@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: "-".join(map(str, s)))
def test_the_engine_follows_the_plain_reference_model_event_by_event(switches):
    made = sum(replay(TEPARev, True, switches, seed) for seed in range(30))
    assert made > 30  # the streams did create precedents
    for seed in range(3):
        replay(TEPANoRev, False, switches, 1000 + seed)


def test_the_replay_exercises_every_transition():
    """Guard against a replay that only ever compares empty memories."""
    engine_events = set()
    for i, switches in enumerate(SWITCHES):
        rng = random.Random(i)
        m = TEPARev(**random_params(rng, switches))
        for t in range(200):
            m.observe(Observation("k", rng.choice("ab"), rng.random() < 0.7, t))
            used = m.retrieve(Query("k"))
            m.feedback(used, rng.random() < 0.5, t)
        engine_events |= {e["event"] for e in m.drain_events()}
    assert {"created", "promoted", "revoked", "repromoted"} <= engine_events
