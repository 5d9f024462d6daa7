"""The audit archive: revoked precedents kept with their counts and history, and the lifecycle event log.

Revocation must be auditable (why, when, on which evidence), so a revoked precedent is never deleted:
it moves here, stays queryable, and leaves again if it is re-promoted. Every lifecycle event is also
appended to a flat log that the runner drains after each episode into `archive.jsonl`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from analysis.streamlog.events import EVENTS, FIELDS, STATES
from tepa.precedent import Precedent

__all__ = ["EVENTS", "EVENT_LAYOUT", "STATES", "Archive"]

#: The fields of a logged event, in order, with their types (`analysis.streamlog.encoding` writes rows of
#: exactly this layout from a template); the event names and states are `EVENTS` and `STATES`, defined
#: with the fields in `analysis.streamlog.events`, which the analysis reads them from.
EVENT_LAYOUT: tuple[tuple[str, type], ...] = tuple(FIELDS.items())


class Archive:
    """Revoked precedents plus the not-yet-drained event log of one memory."""

    __slots__ = ("_revoked", "_events")

    def __init__(self) -> None:
        self._revoked: dict[int, Precedent] = {}
        self._events: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._revoked)

    def __contains__(self, precedent: object) -> bool:
        return isinstance(precedent, Precedent) and self._revoked.get(precedent.id) is precedent

    def revoked(self, key: Hashable | None = None) -> list[Precedent]:
        """Currently revoked precedents (of `key`, if given), oldest first."""
        found = self._revoked.values()
        if key is not None:
            found = [p for p in found if p.key == key]
        return sorted(found, key=lambda p: p.id)

    def records(self) -> list[dict[str, Any]]:
        """Audit records (counts, state, history) of every revoked precedent."""
        return [p.record() for p in self.revoked()]

    def admit(self, precedent: Precedent) -> None:
        """Take in a precedent that has just been revoked."""
        self._revoked[precedent.id] = precedent

    def release(self, precedent: Precedent) -> None:
        """Let a re-promoted precedent leave the archive (its history keeps the revocation)."""
        del self._revoked[precedent.id]

    def log(self, precedent: Precedent, t: int, event: str, reason: str) -> None:
        """Record a lifecycle event in the precedent's history and in the flat log (state after it)."""
        precedent._history.append((t, event, reason))  # what `history` reads
        self._events.append(
            {
                "t": t,
                "event": event,
                "reason": reason,
                "id": precedent.id,
                "key": precedent._key_text,  # key_text(), without the call
                "value": precedent.value,
                "s": precedent.s,
                "f": precedent.f,
                "state": precedent.state._value_,  # the plain str (`.value` is a slow enum property)
            }
        )

    def drain(self) -> list[dict[str, Any]]:
        """Return the events logged since the last drain and forget them."""
        events, self._events = self._events, []
        return events
