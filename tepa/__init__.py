"""TEPA: revocable evidence memory for language agents (the mechanism; imports no other package here)."""

from tepa.evidence import Evidence, Observation, Query
from tepa.protocol import Memory

__all__ = ["Evidence", "Memory", "Observation", "Query"]
