"""Memory protocol inputs: a NaN key was stored but could never be retrieved, `holds="False"` counted as
holding, and feedback matched by `ref` alone let another memory's evidence revoke an unrelated
precedent. Every memory now rejects malformed observations (ValueError naming the field) and ignores
feedback on evidence it did not hand out."""

from __future__ import annotations

import pytest

from runners.registry import build_memory, memory_names
from tepa.evidence import Observation, Query
from tepa.protocol import TrialMemory


@pytest.mark.parametrize("name", memory_names())
@pytest.mark.parametrize(
    ("obs", "field"),
    [
        (Observation(float("nan"), "a"), "observation.key"),
        (Observation(("subject", float("nan")), "a"), "observation.key"),
        (Observation(["unhashable"], "a"), "observation.key"),
        (Observation((1, ["inner"]), "a"), "observation.key"),
        (Observation(1, "a", holds="False"), "observation.holds"),
        (Observation(1, "a", holds=1), "observation.holds"),
        (Observation(1, "a", t=1.5), "observation.t"),
        (Observation(1, "a", t="3"), "observation.t"),
        (Observation(1, "a", t=True), "observation.t"),
        (Observation(1, 7), "observation.value"),
    ],
    ids=repr,
)
def test_a_malformed_observation_is_refused_naming_the_field(name, obs, field):
    memory = build_memory(name)
    with pytest.raises(ValueError, match=field):
        memory.observe(obs)
    assert memory.retrieve(Query(key=1)) == []


def _memory(name: str):
    memory = build_memory(name)
    if isinstance(memory, TrialMemory):
        memory.set_trial(lambda precedent, kind: kind != "counterfactual")  # every trial passes
    return memory


@pytest.mark.parametrize("name", memory_names())
def test_well_formed_observations_are_accepted(name):
    memory = _memory(name)
    for obs in (Observation(None, "x"), Observation(("s", "r"), "o", False, 3), Observation(2.5, "y", t=4)):
        memory.observe(obs)


def _promoted(name: str, key: object, value: str):
    memory = _memory(name)
    for t in range(3):
        memory.observe(Observation(key, value, True, t))
    (ev,) = memory.retrieve(Query(key=key))
    return memory, ev


@pytest.mark.parametrize("name", ["tepa_rev", "tepa_full", "tepa_norev"])
def test_feedback_on_another_memorys_evidence_revokes_nothing(name):
    mine, own = _promoted(name, "job-1", "a")
    _, foreign = _promoted(name, "job-2", "b")
    assert foreign.ref == own.ref  # the same id in another memory: matching by ref alone would hit
    for t in range(3, 13):
        mine.feedback([foreign], success=False, t=t)
    assert mine.retrieve(Query(key="job-1")) == [own] and mine.snapshot()["revoked"] == 0
    if name != "tepa_norev":  # the same failures on its own evidence do revoke (so the check can fail)
        for t in range(13, 23):
            mine.feedback([own], success=False, t=t)
        assert mine.snapshot()["revoked"] == 1


def test_reactive_forgetting_ignores_feedback_on_evidence_it_did_not_hand_out():
    mine = build_memory("reactive", c=2)
    mine.observe(Observation("job-1", "a"))
    (own,) = mine.retrieve(Query(key="job-1"))
    other = build_memory("reactive", c=2)
    other.observe(Observation("job-1", "b"))
    other.observe(Observation("job-1", "c"))
    foreign = other.retrieve(Query(key="job-1"))[-1]  # same key, a ref this memory never gave
    for t in range(5):
        mine.feedback([foreign], success=False, t=t)
    assert mine.retrieve(Query(key="job-1")) == [own]
    mine.feedback([own], success=False, t=5)
    mine.feedback([own], success=False, t=6)
    assert mine.retrieve(Query(key="job-1")) == []
