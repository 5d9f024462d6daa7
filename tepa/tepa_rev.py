"""TEPA-Rev, the paper's default: posterior promotion, posterior / recent-success revocation,
re-promotion when an old regime returns."""

from __future__ import annotations

from tepa.lifecycle import PrecedentMemory


class TEPARev(PrecedentMemory):
    """Revocable evidence memory (TEPA-Rev); rules in `tepa.lifecycle`.

    Keyword arguments (all sweepable): a0, b0 (Beta prior, > 0), n_min (observations before the posterior
    may revoke), theta_rev, theta_pro, theta_rec (thresholds in [0, 1]), W (recent-outcome window),
    m_rec (uses needed before the recent rule may revoke, 1 <= m_rec <= W), top_k (text retrieval).
    """

    name = "tepa_rev"
