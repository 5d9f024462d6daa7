"""Oracle Reset: a diagnostic upper bound on what forgetting at the right moment can achieve."""

from __future__ import annotations

from baselines.append_only import AppendOnly
from tepa.retrieval.rank import DEFAULT_TOP_K


class OracleReset(AppendOnly):
    """An append-only store cleared completely at every true phase boundary.

    It is told what no deployed agent knows (when the world changed), so it bounds adaptation speed
    from above: the paper compares TEPA's recovery after a boundary against it.
    """

    name = "oracle_reset"

    def __init__(self, top_k: int = DEFAULT_TOP_K) -> None:
        super().__init__(top_k=top_k)
        self._forgotten = 0
        self._resets = 0

    def on_phase_boundary(self, phase: str, t: int) -> None:
        self._forgotten += self._drop_all()
        self._resets += 1

    def snapshot(self) -> dict:
        snap = super().snapshot()
        snap["forgotten"] = self._forgotten
        snap["resets"] = self._resets
        return snap
