"""Baseline memory methods; each follows `tepa.protocol.Memory` and ranks through `tepa.retrieval.rank`.

The classes are imported on first use, so that building one baseline does not import the others.
"""

from __future__ import annotations

from tepa.lazy import lazy_exports

_EXPORTS = {
    "AppendOnly": "baselines.append_only",
    "LastWriteWins": "baselines.lww",
    "NoMemory": "baselines.no_memory",
    "OracleReset": "baselines.oracle_reset",
    "ReactiveForgetting": "baselines.reactive",
    "SlidingWindow": "baselines.sliding_window",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
