"""The lifecycle event vocabulary of `archive.jsonl`, in one place.

A memory that implements `drain_events()` (`tepa.EventMemory`) hands the runner these events; the
analysis (timelines, the run inspector, the viewer, the cost table) reads them for any memory that emits
them, not only for the TEPA classes, and `tepa.check_memory` checks a memory's events against them.
Imports nothing of the project: the harness and the analysis both import it (the analysis reads logs
only).
"""

from __future__ import annotations

#: The states a precedent can be in (an event's `state`: the state *after* the event).
STATES: tuple[str, ...] = ("hypothesis", "active", "revoked")

#: Every event name the analysis reads, and what it means.
EVENTS: dict[str, str] = {
    "created": "a new precedent (state hypothesis, or active for a method without hypotheses)",
    "promoted": "hypothesis -> active",
    "revoked": "active or hypothesis -> revoked (kept in the archive, no longer retrieved)",
    "repromoted": "revoked -> active (back from the archive; the precedent keeps its id)",
    "trial": "one trial by execution ran on the precedent (its outcome in `reason`); the state is unchanged",
    "trial_failed": "a round of trials did not admit the precedent; the state is unchanged",
}

#: The state an event leaves its precedent in, where the event decides it.
STATE_AFTER: dict[str, str] = {"promoted": "active", "revoked": "revoked", "repromoted": "active"}

#: The fields of an event and their types: `id` names the precedent (unique within a stream), `key` and
#: `value` are the text the prompt shows, `s` / `f` its support and conflict counts after the event.
FIELDS: dict[str, type] = {
    "t": int,
    "event": str,
    "reason": str,
    "id": int,
    "key": str,
    "value": str,
    "s": int,
    "f": int,
    "state": str,
}
