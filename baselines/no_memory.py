"""No Memory: the reference every other method is measured against (MPI divides by its success)."""

from __future__ import annotations

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import DEFAULT_TOP_K
from tepa.validation import check_int


class NoMemory:
    """Keeps nothing and retrieves nothing, so the agent decides from the task alone.

    `top_k` is accepted (and validated) only so that one memory config fits every method.
    """

    name = "no_memory"

    def __init__(self, top_k: int = DEFAULT_TOP_K) -> None:
        self.top_k = check_int("top_k", top_k, 1)

    def observe(self, obs: Observation) -> None:
        """Discard the observation (after the same input check as every memory)."""
        check_observation(obs)

    def retrieve(self, query: Query) -> list[Evidence]:
        """Nothing is ever retrievable."""
        return []

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Nothing to learn from."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """Nothing to reset."""

    def snapshot(self) -> dict:
        return {"hypothesis": 0, "active": 0, "revoked": 0}
