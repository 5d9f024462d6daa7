"""The precedent lifecycle engine shared by TEPA-Rev, TEPA-Full and TEPA-NoRev.

Observations become keyed precedents with support / conflict counts; a Beta(a0 + s, b0 + f) validity
posterior promotes a hypothesis (mean > theta_pro) and revokes an active precedent (mean < theta_rev once
n_min observations are in, or a recent success rate below theta_rec over at least m_rec of the last W
uses); a revoked precedent comes back (re-promotion) when the evidence gathered since its revocation
passes the promotion rule.

The rule text leaves five choices open. Each is a constructor argument (and a config key), with the
harness's choice as the default; `memory=tepa_rev_literal` reads the rules literally:

- `counts` ("epoch"): what the posterior revocation rule reads. "epoch": the counts of the precedent's
  current epoch (`s_epoch`, `f_epoch`: since its creation or its last revocation); "lifetime": `s`, `f`.
  Promotion always reads the epoch counts, so re-promotion always reads the evidence since revocation.
- `own_failure_new_epoch` (True): a failure of a revoked precedent's own value re-confirms the revocation
  and starts a new epoch, so "since its revocation" means since the world last showed it invalid.
- `revoked_counts_conflicts` (False): whether a revoked precedent's conflict count (lifetime `f` and
  `f_epoch`) grows while another value of its key holds. False: it counts only evidence about its own
  value, so it comes back after one observation of its value however long the other regime lasted.
- `clear_recent_on_revoke` (True): the recent-use window is emptied at revocation.
- `stale_feedback` ("same_epoch"): feedback on evidence whose precedent has since been revoked.
  "same_epoch": it counts only while the precedent is still in the epoch the evidence was retrieved in
  (`Evidence.epoch`), so a re-promoted precedent starts clean; "active_only": it counts whenever the
  precedent is active now; "count": it always enters the precedent's window.

Rules hold after every update, checked where their inputs change: the posterior rules on the precedents
an observation counts on, the recent rule on the precedents feedback reaches, and every rule again after a
promotion (a precedent promoted by one update can meet a revocation condition at once, e.g. with lifetime
counts or a kept window). That is the full fixpoint: a revocation starts an epoch with no evidence, and
validation requires the prior mean a0 / (a0 + b0) <= theta_pro, so nothing follows a revocation; a
conflict only lowers a mean, so it cannot make a promotion due. The hot path touches only the precedents
of one key and builds strings only when a lifecycle event happens.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Hashable
from typing import Any, ClassVar

from tepa.archive import Archive
from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.precedent import Precedent, State
from tepa.retrieval.rank import DEFAULT_TOP_K, rank
from tepa.validation import check_bool, check_choice, check_int, check_positive, check_unit

_HYPOTHESIS, _ACTIVE, _REVOKED = State.HYPOTHESIS, State.ACTIVE, State.REVOKED


#: The values of the two non-boolean switches (see the module docstring).
COUNTS = ("epoch", "lifetime")
STALE_FEEDBACK = ("same_epoch", "active_only", "count")


#: Reason texts `PrecedentMemory._reason` keeps; emptied when full.
_REASONS = 4096


@functools.lru_cache(maxsize=256)
def _created_reason(source: str) -> str:
    """Why a precedent was created (one string per evidence source, so built once per source)."""
    origin = f" (source {source!r})" if source else ""
    return f"first observation that it holds{origin}"


class PrecedentMemory:
    """A revocable evidence memory of precedents (see the module docstring for the exact rules and the
    five switches `counts`, `own_failure_new_epoch`, `revoked_counts_conflicts`,
    `clear_recent_on_revoke`, `stale_feedback`).

    Subclasses choose the variant: `revokes = False` disables revocation (TEPA-NoRev); overriding
    `_admit` gates promotion (TEPA-Full's trials).
    """

    name: ClassVar[str] = "precedent_memory"
    revokes: ClassVar[bool] = True

    def __init__(
        self,
        *,
        a0: float = 1.0,
        b0: float = 1.0,
        n_min: int = 3,
        theta_rev: float = 0.4,
        theta_pro: float = 0.6,
        theta_rec: float = 0.5,
        W: int = 5,
        m_rec: int = 3,
        top_k: int = DEFAULT_TOP_K,
        counts: str = "epoch",
        own_failure_new_epoch: bool = True,
        revoked_counts_conflicts: bool = False,
        clear_recent_on_revoke: bool = True,
        stale_feedback: str = "same_epoch",
    ) -> None:
        self.a0 = check_positive("a0", a0)
        self.b0 = check_positive("b0", b0)
        self.n_min = check_int("n_min", n_min, 1)
        self.theta_rev = check_unit("theta_rev", theta_rev)
        self.theta_pro = check_unit("theta_pro", theta_pro)
        self.theta_rec = check_unit("theta_rec", theta_rec)
        self.W = check_int("W", W, 1)
        self.m_rec = check_int("m_rec", m_rec, 1)
        if self.m_rec > self.W:
            raise ValueError(f"m_rec={m_rec!r}: must be <= W={W} (only the last W outcomes are kept)")
        self.top_k = check_int("top_k", top_k, 1)
        self.counts = check_choice("counts", counts, COUNTS)
        self.stale_feedback = check_choice("stale_feedback", stale_feedback, STALE_FEEDBACK)
        prior = self.a0 / (self.a0 + self.b0)
        if prior > self.theta_pro:
            raise ValueError(
                f"theta_pro={theta_pro!r}: must be >= the prior mean a0/(a0+b0)={prior:.4g}, or a precedent "
                "with no evidence passes the promotion rule and every revocation is undone at once"
            )
        self.own_failure_new_epoch = check_bool("own_failure_new_epoch", own_failure_new_epoch)
        self.revoked_counts_conflicts = check_bool("revoked_counts_conflicts", revoked_counts_conflicts)
        self.clear_recent_on_revoke = check_bool("clear_recent_on_revoke", clear_recent_on_revoke)
        self._lifetime = counts == "lifetime"
        self.archive = Archive()
        self.promotions = 0
        self.revocations = 0
        self.repromotions = 0
        self.trials = 0
        self.trial_passes = 0
        self._by_key: dict[Hashable, dict[str, Precedent]] = {}
        self._all: list[Precedent] = []
        self._active: dict[int, Precedent] = {}
        self._n_hypothesis = 0
        # Thresholds are validated here and fixed after (a later assignment would skip the validation),
        # so the texts of reasons are formatted once: a float's :g costs about a microsecond.
        self._reason_parts = (
            f"{self.a0:g}",
            f"{self.a0:g}+{self.b0:g}",
            f"theta_pro={self.theta_pro:g}",
            f"theta_rev={self.theta_rev:g}",
            f"theta_rec={self.theta_rec:g} (m_rec={self.m_rec}, W={self.W})",
        )
        self._reasons: dict[tuple[str, int, int], str] = {}  # see _reason
        # whether promotion asks `_admit` (a subclass's gate); TEPA-Rev's promotes on the posterior alone
        self._gated = type(self)._admit is not PrecedentMemory._admit

    # --- the Memory protocol -------------------------------------------------------------------------

    def observe(self, obs: Observation) -> None:
        """Count `obs` on the precedents of its key (one key has one current value), create a hypothesis
        for a new value that holds, and check the rules of what changed."""
        check_observation(obs)
        key, value, holds, t = obs.key, obs.value, obs.holds, obs.t
        group = self._by_key.get(key)
        if group is None:
            if not holds:
                return
            group = self._by_key[key] = {}
        own = group.get(value)
        revokes = self.revokes
        if holds:
            count_revoked = self.revoked_counts_conflicts
            for p in group.values():
                state = p.state
                if p is own or (state is _REVOKED and not count_revoked):
                    continue
                p.f += 1
                p.f_epoch += 1
                p.updated_t = t
                p._evidence = None
                if state is _ACTIVE and revokes:  # _posterior_due, inlined: the hot path
                    if self._lifetime:
                        s, n = p.s, p.s + p.f
                    else:
                        s = p.s_epoch
                        n = s + p.f_epoch
                    if n >= self.n_min and (self.a0 + s) / (self.a0 + self.b0 + n) < self.theta_rev:
                        self._revoke_by_posterior(p, t)
            if own is None:
                self._create(obs, group)
                return
            own.s += 1
            own.s_epoch += 1
            own.text = obs.text
            own.source = obs.source
        elif own is None:
            return
        else:
            own.f += 1
            own.f_epoch += 1
            if own.state is _REVOKED and self.own_failure_new_epoch:
                self._new_epoch(own)
        own.updated_t = t
        own._evidence = None
        if own.state is _ACTIVE:
            if revokes:  # _posterior_due, inlined
                if self._lifetime:
                    s, n = own.s, own.s + own.f
                else:
                    s = own.s_epoch
                    n = s + own.f_epoch
                if n >= self.n_min and (self.a0 + s) / (self.a0 + self.b0 + n) < self.theta_rev:
                    self._revoke_by_posterior(own, t)
        elif holds:
            self._check_promotion(own, t)

    def retrieve(self, query: Query) -> list[Evidence]:
        """Active precedents only, ranked by the shared `tepa.retrieval.rank`."""
        if query.key is not None:
            group = self._by_key.get(query.key)
            if not group:
                return []
            # p._evidence is the cached p.evidence(), rebuilt only after an update (the hot path)
            candidates = [p._evidence or p.evidence() for p in group.values() if p.state is _ACTIVE]
        else:
            candidates = [p._evidence or p.evidence() for p in self._active.values()]
        return rank(candidates, query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Append the outcome to the window of each used precedent it counts for (`stale_feedback`),
        then check the recent-success revocation rule. Evidence this memory did not hand out (its ref
        names no precedent, or one of another key) is ignored."""
        outcome = True if success else False  # as bool(success), without a call
        every, mode = self._all, self.stale_feedback
        for ev in used:
            ref = ev.ref  # the precedent's id
            if type(ref) is not int or not 0 <= ref < len(every):
                continue
            p = every[ref]
            if p.key != ev.key:
                continue
            if mode == "same_epoch":
                if p.epoch != ev.epoch:
                    continue
            elif mode == "active_only" and p.state is not _ACTIVE:
                continue
            recent = p.recent
            if type(recent) is tuple:  # the first use (see Precedent.recent)
                recent = p.recent = deque((), self.W)
            recent.append(outcome)
            if (
                p.state is _ACTIVE
                and self.revokes
                and len(recent) >= self.m_rec
                and sum(recent) / len(recent) < self.theta_rec
            ):
                self._revoke_by_recent(p, t)

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """TEPA is not told about phases: it has to notice change from evidence."""

    def snapshot(self) -> dict[str, int]:
        """Precedents by state, and lifecycle counters: `revocations` counts every move into the archive
        (posterior rule, recent rule, or TEPA-Full's failed trial); `trials` are 0 outside TEPA-Full."""
        return {
            "hypothesis": self._n_hypothesis,
            "active": len(self._active),
            "revoked": len(self.archive),
            "promotions": self.promotions,
            "revocations": self.revocations,
            "repromotions": self.repromotions,
            "trials": self.trials,
            "trial_passes": self.trial_passes,
        }

    # --- inspection ------------------------------------------------------------------------------------

    def drain_events(self) -> list[dict[str, Any]]:
        """Lifecycle events since the last drain (t, event, reason, id, key, value, s, f, state)."""
        return self.archive.drain()

    def precedents(self, key: Hashable | None = None) -> list[Precedent]:
        """Every precedent in any state (of `key`, if given), in creation order."""
        if key is None:
            return list(self._all)
        return list(self._by_key.get(key, {}).values())

    def lookup(self, key: Hashable, value: str) -> Precedent | None:
        """The one precedent of (key, value), whatever its state, or None."""
        group = self._by_key.get(key)
        return None if group is None else group.get(value)

    # --- transitions -----------------------------------------------------------------------------------

    def _posterior_due(self, p: Precedent) -> bool:
        """The posterior revocation condition, on the counts `counts` names."""
        if self._lifetime:
            s, n = p.s, p.s + p.f
        else:
            s = p.s_epoch
            n = s + p.f_epoch
        return n >= self.n_min and (self.a0 + s) / (self.a0 + self.b0 + n) < self.theta_rev

    def _recent_due(self, p: Precedent) -> bool:
        """The recent-success revocation condition."""
        recent = p.recent
        return len(recent) >= self.m_rec and sum(recent) / len(recent) < self.theta_rec

    def _create(self, obs: Observation, group: dict[str, Precedent]) -> None:
        p = Precedent(len(self._all), obs.key, obs.value, obs.t, obs.text, obs.source)
        self._all.append(p)
        group[obs.value] = p
        self._n_hypothesis += 1
        self.archive.log(p, obs.t, "created", _created_reason(obs.source))
        self._check_promotion(p, obs.t)

    def _check_promotion(self, p: Precedent, t: int) -> None:
        """Promote a hypothesis, or re-promote a revoked precedent, whose epoch mean passes theta_pro."""
        s, f = p.s_epoch, p.f_epoch
        if (self.a0 + s) / (self.a0 + self.b0 + s + f) <= self.theta_pro:
            return
        verdict = self._admit(p, t) if self._gated else ""
        if verdict is None:
            return
        reason = (self._reasons.get(("pro", s, f)) or self._reason("pro", s, f)) + verdict
        if p.state is _HYPOTHESIS:
            self._n_hypothesis -= 1
            p.state = _ACTIVE
            self._active[p.id] = p
            self.promotions += 1
            self.archive.log(p, t, "promoted", reason)
        else:
            since = next(when for when, event, _ in reversed(p._history) if event == "revoked")
            self.archive.release(p)
            p.state = _ACTIVE
            self._active[p.id] = p
            self.repromotions += 1
            self.archive.log(p, t, "repromoted", f"revoked at t={since}; epoch {p.epoch} evidence: {reason}")
        # the rest of the fixpoint: a promoted precedent may already meet a revocation condition (not
        # before n_min observations in its life, whose epoch counts are part of them, nor unused)
        if self.revokes:
            if p.s + p.f >= self.n_min and self._posterior_due(p):
                self._revoke_by_posterior(p, t)
            elif p.recent and self._recent_due(p):
                self._revoke_by_recent(p, t)

    def _admit(self, p: Precedent, t: int) -> str | None:
        """Gate a promotion whose posterior has passed: a suffix for the reason to promote, None to hold.
        TEPA-Rev promotes on the posterior alone."""
        return ""

    def _reason(self, kind: str, s: int, f: int) -> str:
        """The reason of a promotion (`kind` "pro": on epoch counts) or a posterior revocation ("rev" on
        epoch counts, "rev_lifetime" on lifetime ones) on counts (s, f). Remembered in `_reasons`, where
        callers look first: a fact stream promotes and revokes thousands of precedents on the same few
        counts, and `:.4f` costs about a microsecond."""
        which = "" if kind == "rev_lifetime" else "_epoch"
        prior, both, pro, rev, _ = self._reason_parts
        m = (self.a0 + s) / (self.a0 + self.b0 + s + f)
        rule = f"m{which}=({prior}+{s})/({both}+{s}+{f})={m:.4f}"
        if kind == "pro":
            text = f"{rule} > {pro}"
        else:
            text = f"posterior: s{which}+f{which}={s}+{f} >= n_min={self.n_min} and {rule} < {rev}"
        if len(self._reasons) >= _REASONS:
            self._reasons.clear()
        self._reasons[kind, s, f] = text
        return text

    def _revoke_by_posterior(self, p: Precedent, t: int) -> None:
        s, f, kind = (p.s, p.f, "rev_lifetime") if self._lifetime else (p.s_epoch, p.f_epoch, "rev")
        self._revoke(p, t, self._reasons.get((kind, s, f)) or self._reason(kind, s, f))

    def _revoke_by_recent(self, p: Precedent, t: int) -> None:
        n, ok = len(p.recent), sum(p.recent)
        self._revoke(
            p, t, f"recent: {ok}/{n} of the last uses succeeded = {ok / n:.4f} < {self._reason_parts[4]}"
        )

    def _revoke(self, p: Precedent, t: int, reason: str) -> None:
        """Move `p` (active or hypothesis) to the archive and start its next epoch."""
        if p.state is _ACTIVE:
            del self._active[p.id]
        else:
            self._n_hypothesis -= 1
        p.state = _REVOKED
        self._new_epoch(p)
        if self.clear_recent_on_revoke:
            p.recent = ()
        self.archive.admit(p)
        self.revocations += 1
        self.archive.log(p, t, "revoked", reason)

    @staticmethod
    def _new_epoch(p: Precedent) -> None:
        """Start counting afresh; the epoch number tells feedback which retrievals are stale."""
        p.s_epoch = 0
        p.f_epoch = 0
        p.epoch += 1
        p.trial_rounds = 0
        p._evidence = None
