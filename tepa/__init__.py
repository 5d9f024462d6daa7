"""TEPA: revocable evidence memory for language agents (the mechanism; imports no other package here)."""

from tepa.archive import Archive
from tepa.evidence import Evidence, Observation, Query
from tepa.precedent import LifecycleEvent, Precedent, State
from tepa.protocol import Memory
from tepa.tepa_full import TEPAFull
from tepa.tepa_norev import TEPANoRev
from tepa.tepa_rev import TEPARev, TEPARevLiteral

__all__ = [
    "Archive",
    "Evidence",
    "LifecycleEvent",
    "Memory",
    "Observation",
    "Precedent",
    "Query",
    "State",
    "TEPAFull",
    "TEPANoRev",
    "TEPARev",
    "TEPARevLiteral",
]
