"""Last-Write-Wins: one current value per key, overwritten only by a newer success."""

from __future__ import annotations

from collections.abc import Hashable

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import DEFAULT_TOP_K, rank
from tepa.validation import check_int


class LastWriteWins:
    """Keeps only the most recent successful (holds=True) observation per key.

    Failures are ignored, as in the paper: after a reversal the stale value keeps failing but is never
    replaced until a different value happens to succeed, which is why LWW collapses on reversals.
    """

    name = "lww"

    def __init__(self, top_k: int = DEFAULT_TOP_K) -> None:
        self.top_k = check_int("top_k", top_k, 1)
        self._latest: dict[Hashable, Evidence] = {}
        self._seen = 0
        self._writes = 0

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        if obs.holds:
            self._latest[obs.key] = Evidence(
                obs.key, obs.value, True, obs.t, obs.text, obs.source, self._seen
            )
            self._writes += 1
        self._seen += 1

    def retrieve(self, query: Query) -> list[Evidence]:
        if query.key is not None:
            ev = self._latest.get(query.key)
            return rank((ev,), query, self.top_k) if ev is not None else []
        return rank(self._latest.values(), query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """LWW does not learn from outcomes."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """LWW is not told about phases."""

    def snapshot(self) -> dict:
        active = len(self._latest)
        return {"hypothesis": 0, "active": active, "revoked": 0, "forgotten": self._writes - active}
