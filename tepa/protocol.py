"""The one memory protocol every method implements (TEPA variants and baselines alike)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tepa.evidence import Evidence, Observation, Query


@runtime_checkable
class Memory(Protocol):
    """A memory method. Methods differ only in what they keep retrievable, not in how it is ranked:
    every implementation ranks through `tepa.retrieval.rank`."""

    name: str

    def observe(self, obs: Observation) -> None:
        """Take in new evidence (an outcome of acting, a stated fact, a trial result)."""

    def retrieve(self, query: Query) -> list[Evidence]:
        """Return what goes into the prompt: retrievable (for TEPA: active) evidence only."""

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Report the outcome of acting on `used` (the retrieved evidence the agent followed)."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """Told at each true phase boundary; a no-op for every method but Oracle Reset."""

    def snapshot(self) -> dict:
        """Counts by state (and any method-specific counters) for the episode log."""
