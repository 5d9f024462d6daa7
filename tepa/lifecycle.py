"""The precedent lifecycle engine shared by TEPA-Rev, TEPA-Full and TEPA-NoRev.

Observations become keyed precedents with support / conflict counts; a Beta(a0 + s, b0 + f) validity
posterior promotes a hypothesis (mean > theta_pro) and revokes an active precedent (mean < theta_rev once
n_min observations are in, or a recent success rate below theta_rec); revoked precedents keep counting
evidence about their own value and come back (re-promotion) when the evidence gathered since their
revocation passes the promotion rule.

Epochs: every transition reads the counts of the precedent's current *epoch*, i.e. since its creation or
its last revocation (`s_epoch`, `f_epoch`); the lifetime counts `s`, `f` are kept for the audit and shown
in retrieved evidence. In the first epoch the epoch counts are the lifetime counts, so the rules are
exactly the paper's; without epochs a revoked precedent would carry its old conflicts forever and could
never be re-promoted. A failure of a revoked precedent's own value re-confirms its revocation and starts a
new epoch (the lifetime `f` still counts it): "the evidence since its revocation" is then the evidence
since the world last showed it invalid, so a precedent tried and failed during later regimes still comes
back promptly when its regime returns.

Transitions are checked after every update, each rule when its inputs change (which is equivalent: a
rule can only become true then): the posterior rules after `observe`, the recent-success rule after
`feedback`. One update makes at most one transition per precedent. The hot path touches only the
precedents of one key and builds strings only when a lifecycle event happens.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Hashable
from typing import Any, ClassVar

from tepa.archive import Archive
from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.precedent import Precedent, State
from tepa.retrieval import DEFAULT_TOP_K, rank

_HYPOTHESIS, _ACTIVE, _REVOKED = State.HYPOTHESIS, State.ACTIVE, State.REVOKED


def check_int(name: str, value: Any, minimum: int) -> int:
    """Validate an integer parameter (bools rejected), raising ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _check_positive(name: str, value: Any) -> float:
    x = _check_real(name, value)
    if x <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return x


def _check_unit(name: str, value: Any) -> float:
    x = _check_real(name, value)
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return x


@functools.lru_cache(maxsize=256)
def _created_reason(source: str) -> str:
    """Why a precedent was created (one string per evidence source, so built once per source)."""
    origin = f" (source {source!r})" if source else ""
    return f"first observation that it holds{origin}"


class PrecedentMemory:
    """A revocable evidence memory of precedents (see the module docstring for the exact rules).

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
    ) -> None:
        self.a0 = _check_positive("a0", a0)
        self.b0 = _check_positive("b0", b0)
        self.n_min = check_int("n_min", n_min, 1)
        self.theta_rev = _check_unit("theta_rev", theta_rev)
        self.theta_pro = _check_unit("theta_pro", theta_pro)
        self.theta_rec = _check_unit("theta_rec", theta_rec)
        self.W = check_int("W", W, 1)
        self.m_rec = check_int("m_rec", m_rec, 1)
        if self.m_rec > self.W:
            raise ValueError(f"m_rec must be <= W (= {W}), got {m_rec!r}")
        self.top_k = check_int("top_k", top_k, 1)
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
        self._reason_params: tuple | None = None
        self._reason_texts: tuple[str, ...] = ()

    # --- the Memory protocol -------------------------------------------------------------------------

    def observe(self, obs: Observation) -> None:
        """Count `obs` on every live precedent of its key (one key has one current value), create a
        hypothesis for a new value that holds, and check transitions on what changed."""
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
            for p in group.values():
                state = p.state
                if p is own or state is _REVOKED:
                    continue
                p.f += 1
                p.f_epoch += 1
                p.updated_t = t
                p._evidence = None
                if state is _ACTIVE and revokes:
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
            if own.state is _REVOKED:
                self._new_epoch(own)
        own.updated_t = t
        own._evidence = None
        if own.state is _ACTIVE:
            if revokes:
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
            candidates = [p.evidence() for p in self._active.values()]
        return rank(candidates, query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """Append the outcome to `recent` of each used precedent that is still active (one revoked since
        retrieval starts its new epoch clean), then check the recent-success revocation rule. Evidence
        this memory did not hand out (its ref names another precedent's id, or another memory's) is
        ignored: the ref must name an active precedent of the same key."""
        active = self._active
        outcome = True if success else False  # as bool(success), without a call
        for ev in used:
            p = active.get(ev.ref)
            if p is None or p.key != ev.key:
                continue
            recent = p.recent
            recent.append(outcome)
            if self.revokes and len(recent) >= self.m_rec and sum(recent) / len(recent) < self.theta_rec:
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

    def _create(self, obs: Observation, group: dict[str, Precedent]) -> None:
        p = Precedent(
            id=len(self._all),
            key=obs.key,
            value=obs.value,
            created_t=obs.t,
            recent=deque((), self.W),  # positional: half the cost of maxlen=
            s=1,
            s_epoch=1,
            updated_t=obs.t,
            text=obs.text,
            source=obs.source,
            history=[],  # given, not left to the default factory: creation is on the hot path
        )
        self._all.append(p)
        group[obs.value] = p
        self._n_hypothesis += 1
        self.archive.log(p, obs.t, "created", _created_reason(obs.source))
        self._check_promotion(p, obs.t)

    def _check_promotion(self, p: Precedent, t: int) -> None:
        """Promote a hypothesis, or re-promote a revoked precedent, whose epoch mean passes theta_pro."""
        s, f = p.s_epoch, p.f_epoch
        m = (self.a0 + s) / (self.a0 + self.b0 + s + f)
        if m <= self.theta_pro:
            return
        verdict = self._admit(p, t)
        if verdict is None:
            return
        prior, both, pro, _, _ = self._reasons()
        reason = f"m_epoch=({prior}+{s})/({both}+{s}+{f})={m:.4f} > {pro}{verdict}"
        if p.state is _HYPOTHESIS:
            self._n_hypothesis -= 1
            p.state = _ACTIVE
            self._active[p.id] = p
            self.promotions += 1
            self.archive.log(p, t, "promoted", reason)
        else:
            since = next(e.t for e in reversed(p.history) if e.event == "revoked")
            self.archive.release(p)
            p.state = _ACTIVE
            self._active[p.id] = p
            self.repromotions += 1
            self.archive.log(p, t, "repromoted", f"revoked at t={since}; epoch {p.epoch} evidence: {reason}")

    def _admit(self, p: Precedent, t: int) -> str | None:
        """Gate a promotion whose posterior has passed: a suffix for the reason to promote, None to hold.
        TEPA-Rev promotes on the posterior alone."""
        return ""

    def _reasons(self) -> tuple[str, ...]:
        """The constant parts of the transition reasons: the prior "a0", "a0+b0" and the thresholds.
        Formatted once per setting of the thresholds, because formatting a float with :g costs about a
        microsecond and every lifecycle event needs several."""
        params = (
            self.a0,
            self.b0,
            self.n_min,
            self.theta_rev,
            self.theta_pro,
            self.theta_rec,
            self.m_rec,
            self.W,
        )
        if params != self._reason_params:
            self._reason_params = params
            self._reason_texts = (
                f"{self.a0:g}",
                f"{self.a0:g}+{self.b0:g}",
                f"theta_pro={self.theta_pro:g}",
                f"theta_rev={self.theta_rev:g}",
                f"theta_rec={self.theta_rec:g} (m_rec={self.m_rec}, W={self.W})",
            )
        return self._reason_texts

    def _revoke_by_posterior(self, p: Precedent, t: int) -> None:
        s, f = p.s_epoch, p.f_epoch
        m = (self.a0 + s) / (self.a0 + self.b0 + s + f)
        prior, both, _, rev, _ = self._reasons()
        self._revoke(
            p,
            t,
            f"posterior: s_epoch+f_epoch={s}+{f} >= n_min={self.n_min} and "
            f"m_epoch=({prior}+{s})/({both}+{s}+{f})={m:.4f} < {rev}",
        )

    def _revoke_by_recent(self, p: Precedent, t: int) -> None:
        n, ok = len(p.recent), sum(p.recent)
        self._revoke(
            p, t, f"recent: {ok}/{n} of the last uses succeeded = {ok / n:.4f} < {self._reasons()[4]}"
        )

    def _revoke(self, p: Precedent, t: int, reason: str) -> None:
        """Move `p` (active or hypothesis) to the archive and start its next epoch."""
        if p.state is _ACTIVE:
            del self._active[p.id]
        else:
            self._n_hypothesis -= 1
        p.state = _REVOKED
        self._new_epoch(p)
        self.archive.admit(p)
        self.revocations += 1
        self.archive.log(p, t, "revoked", reason)

    @staticmethod
    def _new_epoch(p: Precedent) -> None:
        p.s_epoch = 0
        p.f_epoch = 0
        p.epoch += 1
        p.trial_rounds = 0
        p.recent.clear()
