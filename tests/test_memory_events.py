"""Every memory's lifecycle events: one vocabulary (`analysis.streamlog.events`), which `tepa.check_memory`
checks a memory's events against and the harness and the analysis share."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.streamlog.events import EVENTS, FIELDS, STATES
from tepa import MemoryCheckError, check_memory
from tepa.archive import EVENT_LAYOUT
from tepa.precedent import State
from tests.helpers.event_memory import DistrustOnFailure


def test_the_vocabulary_is_the_harness_own():
    assert {s.value for s in State} == set(STATES)
    assert EVENT_LAYOUT == tuple(FIELDS.items())
    assert {"created", "promoted", "revoked", "repromoted", "trial"} <= set(EVENTS)


def test_a_memory_of_ones_own_that_logs_events_passes_check_memory():
    check_memory(DistrustOnFailure)


def _broken(change: Any) -> type:
    class Broken(DistrustOnFailure):
        def drain_events(self) -> list[dict[str, Any]]:
            return [change(dict(e)) for e in super().drain_events()]

    return Broken


def _without(field: str) -> Any:
    return lambda e: {k: v for k, v in e.items() if k != field}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: {**e, "event": "forgot"}, r"unknown event 'forgot' \(the analysis reads: created, "),
        (_without("id"), r"an event lacks 'id' \(every event has t, event, reason, id, "),
        (lambda e: {**e, "s": 1.0}, r"event field s=1\.0 must be int"),
        (lambda e: {**e, "state": "stale"}, r"created event with state 'stale' \(one of: hypothesis, "),
        (
            lambda e: {**e, "state": "active"} if e["event"] == "revoked" else e,
            r"a revoked event must leave its precedent revoked, not active",
        ),
        (
            lambda e: {**e, "event": "promoted", "state": "active"} if e["event"] == "created" else e,
            r"precedent id 0's first event is 'promoted', not 'created'",
        ),
        (
            lambda e: {**e, "value": "other"} if e["event"] == "revoked" else e,
            r"precedent id \d+ changed its key or value",
        ),
    ],
)
def test_check_memory_refuses_events_the_analysis_would_misread(change, message):
    expected = f"^memory check failed: events: call \\d+: {message}"
    with pytest.raises(MemoryCheckError, match=expected) as caught:
        check_memory(_broken(change))
    assert "\n" not in str(caught.value)
