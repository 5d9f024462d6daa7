"""TEPA-Full: TEPA-Rev plus trial-by-execution before every promotion and re-promotion."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from tepa.lifecycle import PrecedentMemory
from tepa.precedent import Precedent, State
from tepa.retrieval.rank import DEFAULT_TOP_K
from tepa.validation import check_int

TRIAL_KINDS = ("support", "counterfactual", "contamination")
MIN_PASS_RATE = Fraction(3, 5)  # exact, so that 3 of 5 passes is promoted whatever the float rounding

TrialFn = Callable[[Precedent, str], bool]


class TEPAFull(PrecedentMemory):
    """When a candidate (a hypothesis, or a revoked precedent up for re-promotion) crosses theta_pro,
    the environment executes it on trial tasks: `n_support` support trials (same key, should succeed),
    `n_counterfactual` (a perturbed task where it should not apply) and `n_contamination` (other keys,
    which must not get worse). It is promoted only if at least 60% of the trials pass and at least one
    support trial passes. Otherwise (event "trial_failed") it is tried again only when new supporting
    evidence arrives; after `max_trial_rounds` failed rounds in one epoch a hypothesis is archived
    (revoked, reason "failed trial") and a revoked candidate starts a new epoch. Every trial is a real
    execution, so trials and passes are counted in `snapshot()` as cost.

    By default one failed round archives the candidate. A hypothesis left waiting keeps counting a
    conflict for every observation of its key's other values, and while its value is wrong there are many:
    when the world later moves to its value, those conflicts hold it below theta_pro long after its
    trials would pass (on preference_stream a glitch's candidate then blocked the real change to the same
    value). In the archive it counts only evidence about its own value, in a fresh epoch, like any revoked
    precedent. Raise `max_trial_rounds` only where trials are noisy.

    `trial_fn(precedent, kind) -> bool` is usually the environment's `trial`, given here or later via
    `set_trial`. The other keyword arguments are TEPA-Rev's thresholds and rule switches, with the same
    defaults.
    """

    name = "tepa_full"

    def __init__(
        self,
        *,
        trial_fn: TrialFn | None = None,
        n_support: int = 2,
        n_counterfactual: int = 1,
        n_contamination: int = 2,
        max_trial_rounds: int = 1,
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
        super().__init__(
            a0=a0,
            b0=b0,
            n_min=n_min,
            theta_rev=theta_rev,
            theta_pro=theta_pro,
            theta_rec=theta_rec,
            W=W,
            m_rec=m_rec,
            top_k=top_k,
            counts=counts,
            own_failure_new_epoch=own_failure_new_epoch,
            revoked_counts_conflicts=revoked_counts_conflicts,
            clear_recent_on_revoke=clear_recent_on_revoke,
            stale_feedback=stale_feedback,
        )
        self.n_support = check_int("n_support", n_support, 1)
        self.n_counterfactual = check_int("n_counterfactual", n_counterfactual, 0)
        self.n_contamination = check_int("n_contamination", n_contamination, 0)
        self.max_trial_rounds = check_int("max_trial_rounds", max_trial_rounds, 1)
        self._plan = (
            ("support", self.n_support),
            ("counterfactual", self.n_counterfactual),
            ("contamination", self.n_contamination),
        )
        self._trial_fn: TrialFn | None = None
        self.set_trial(trial_fn)

    def set_trial(self, fn: TrialFn | None) -> None:
        """Set (or clear) the function that runs one trial: `fn(precedent, kind) -> bool`."""
        if fn is not None and not callable(fn):
            raise ValueError(f"trial_fn must be callable (precedent, kind) -> bool, got {fn!r}")
        self._trial_fn = fn

    def _admit(self, p: Precedent, t: int) -> str | None:
        """Run one round of trials on `p`; a reason suffix if it passes, None if it does not."""
        trial = self._trial_fn
        if trial is None:
            raise RuntimeError(
                "TEPAFull has no trial function: pass trial_fn=env.trial to the constructor "
                "or call set_trial(env.trial) before the first observation"
            )
        p.trial_rounds += 1
        rnd = p.trial_rounds
        passed = support_passed = total = 0
        for kind, n in self._plan:
            for i in range(1, n + 1):
                ok = bool(trial(p, kind))
                total += 1
                self.trials += 1
                if ok:
                    passed += 1
                    self.trial_passes += 1
                    if kind == "support":
                        support_passed += 1
                self.archive.log(
                    p, t, "trial", f"round {rnd}: {kind} trial {i}/{n} {'passed' if ok else 'failed'}"
                )
        summary = f"round {rnd}: {passed}/{total} trials passed, {support_passed} of them support"
        if support_passed >= 1 and Fraction(passed, total) >= MIN_PASS_RATE:
            return f"; trials {summary}"
        exhausted = rnd >= self.max_trial_rounds
        suffix = ""
        if exhausted and p.state is State.REVOKED:
            self._new_epoch(p)
            suffix = f"; {rnd} failed rounds: a new epoch starts"
        self.archive.log(p, t, "trial_failed", f"{summary} (needs >= 60% and >= 1 support){suffix}")
        if exhausted and p.state is State.HYPOTHESIS:
            self._revoke(p, t, f"failed trial: {rnd} rounds failed (last {passed}/{total})")
        return None
