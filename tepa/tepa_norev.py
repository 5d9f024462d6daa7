"""TEPA-NoRev, the ablation: the same lifecycle and promotion, revocation switched off."""

from __future__ import annotations

from tepa.lifecycle import PrecedentMemory


class TEPANoRev(PrecedentMemory):
    """Precedents are promoted exactly as in TEPA-Rev but never revoked, so after a change the stale
    and the new value stay active side by side: the paper's evidence that revocation is what helps.

    Takes the same keyword arguments as `TEPARev` (the revocation thresholds and the rule switches are
    accepted and have no effect, as nothing is ever revoked, so one config sweeps every variant).
    """

    name = "tepa_norev"
    revokes = False
