"""TEPA: revocable evidence memory for language agents (the mechanism; imports no other package here)."""

from tepa.archive import Archive
from tepa.evidence import Evidence, Observation, Query
from tepa.memory_checker import MemoryCheckError, check_memory
from tepa.precedent import LifecycleEvent, Precedent, State
from tepa.protocol import EventMemory, Memory, TrialFn, TrialMemory
from tepa.tepa_full import TEPAFull
from tepa.tepa_norev import TEPANoRev
from tepa.tepa_rev import TEPARev, TEPARevLiteral

__all__ = [
    "Archive",
    "Evidence",
    "EventMemory",
    "LifecycleEvent",
    "Memory",
    "MemoryCheckError",
    "Observation",
    "Precedent",
    "Query",
    "State",
    "TEPAFull",
    "TEPANoRev",
    "TEPARev",
    "TEPARevLiteral",
    "TrialFn",
    "TrialMemory",
    "check_memory",
]
