"""TEPA-Rev, the paper's default: posterior promotion, posterior / recent-success revocation,
re-promotion when an old regime returns."""

from __future__ import annotations

import functools

from tepa.lifecycle import PrecedentMemory


class TEPARev(PrecedentMemory):
    """Revocable evidence memory (TEPA-Rev); rules in `tepa.lifecycle`.

    Keyword arguments (all sweepable): a0, b0 (Beta prior, > 0), n_min (observations before the posterior
    may revoke), theta_rev, theta_pro, theta_rec (thresholds in [0, 1]), W (recent-outcome window),
    m_rec (uses needed before the recent rule may revoke, 1 <= m_rec <= W), top_k (text retrieval), and
    the five rule switches, whose defaults are the harness's reading of the rules:
    counts ("epoch" | "lifetime": what the posterior revocation rule reads), own_failure_new_epoch
    (True: a revoked precedent's own failure restarts its evidence since revocation),
    revoked_counts_conflicts (False: a revoked precedent counts no conflicts), clear_recent_on_revoke
    (True: the recent-use window is emptied at revocation) and stale_feedback ("same_epoch" |
    "active_only" | "count": feedback that arrives after the precedent was revoked). Validation requires
    the prior mean a0 / (a0 + b0) <= theta_pro. `memory=tepa_rev_literal` sets the switches to the rule
    text read literally.
    """

    name = "tepa_rev"


#: The rule switches read literally (see `tepa.lifecycle`); `TEPARevLiteral`'s defaults.
LITERAL_RULES = {
    "counts": "lifetime",
    "own_failure_new_epoch": False,
    "revoked_counts_conflicts": True,
    "clear_recent_on_revoke": False,
    "stale_feedback": "active_only",
}


class TEPARevLiteral(TEPARev):
    """TEPA-Rev with the rule text read literally (`memory=tepa_rev_literal`): transitions read lifetime
    counts, a revoked precedent keeps counting conflicts and its recent-use window, its own failures do
    not restart its evidence since revocation, and feedback counts only for a precedent active now. Only
    the switches' defaults differ from `TEPARev` (its signature shows them); every argument can be set."""

    name = "tepa_rev_literal"
    __init__ = functools.partialmethod(TEPARev.__init__, **LITERAL_RULES)
