"""TEPA: revocable evidence memory for language agents (the mechanism; of the project's other packages
it imports only the shared log model, `analysis.streamlog`).

The names below are imported on first use, so that importing one module (the protocol, the evidence
types) does not import every memory method.
"""

from __future__ import annotations

from tepa.lazy import lazy_exports

_EXPORTS = {
    "Archive": "tepa.archive",
    "Evidence": "tepa.evidence",
    "EventMemory": "tepa.protocol",
    "LifecycleEvent": "tepa.precedent",
    "Memory": "tepa.protocol",
    "MemoryCheckError": "tepa.memory_checker",
    "Observation": "tepa.evidence",
    "Precedent": "tepa.precedent",
    "Query": "tepa.evidence",
    "State": "tepa.precedent",
    "TEPAFull": "tepa.tepa_full",
    "TEPANoRev": "tepa.tepa_norev",
    "TEPARev": "tepa.tepa_rev",
    "TEPARevLiteral": "tepa.tepa_rev",
    "TrialFn": "tepa.protocol",
    "TrialMemory": "tepa.protocol",
    "check_memory": "tepa.memory_checker",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
