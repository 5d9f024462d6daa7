"""Statistics over seeds: bootstrap confidence intervals, paired sign-flip tests, Holm correction.

The unit of replication is the seed: every estimate here takes one value per seed (a run's success rate,
say), never individual episodes, because episodes within a run are not independent.

All randomness is seeded (`seed`, fixed `n_resamples`), so the same inputs give the same intervals and
p-values on every machine and every rerun; the tables built from them are byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

CONFIDENCE_LEVEL = 0.95
N_RESAMPLES = 9999
SEED = 0
#: Largest number of pairs for which the sign-flip null distribution is enumerated exactly (2**16 sign
#: patterns); above it the test draws `n_resamples` random sign patterns.
EXACT_MAX_PAIRS = 16


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap confidence interval over `n` seeds.

    `low`/`high` are NaN when an interval is undefined (n < 2); when every input is constant the
    interval is degenerate, `low == high == mean`.
    """

    mean: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class PairedComparison:
    """Method A against method B on matched seeds: `diff` is the mean of the per-seed A - B."""

    n: int
    mean_a: float
    mean_b: float
    diff: Estimate
    p_value: float
    d_z: float


def _as_samples(samples: Sequence[Sequence[float]]) -> list[np.ndarray]:
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if not arrays:
        raise ValueError("samples: need at least one sample")
    for a in arrays:
        if a.ndim != 1:
            raise ValueError("samples: each sample must be one-dimensional")
        if np.isnan(a).any():
            raise ValueError("samples: NaN values (drop missing seeds before estimating)")
    return arrays


def bootstrap_ci(
    samples: Sequence[Sequence[float]],
    statistic: Callable[..., np.ndarray],
    *,
    paired: bool = False,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    method: str = "BCa",
) -> Estimate:
    """Point estimate and bootstrap CI of `statistic(*samples, axis=-1)` via `scipy.stats.bootstrap`.

    `statistic` must be vectorised (accept `axis`). With `paired=True` the samples are resampled
    together (matched seeds). Degenerate inputs are answered without resampling: with fewer than two
    values the interval is NaN (a single seed says nothing about spread); when every sample is constant
    the interval collapses to the point estimate (BCa would otherwise return NaN).
    """
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level: must be in (0, 1), got {confidence_level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples: must be >= 1, got {n_resamples}")
    arrays = _as_samples(samples)
    n = min(len(a) for a in arrays)
    if paired and any(len(a) != n for a in arrays):
        raise ValueError("samples: paired samples must have equal lengths")
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    point = float(statistic(*arrays, axis=-1))
    if n < 2:
        return Estimate(point, float("nan"), float("nan"), n)
    if all(np.ptp(a) == 0 for a in arrays):
        return Estimate(point, point, point, n)
    result = scipy.stats.bootstrap(
        tuple(arrays),
        statistic,
        paired=paired,
        vectorized=True,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        method=method,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return Estimate(point, float(ci.low), float(ci.high), n)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def mean_ci(
    values: Sequence[float],
    *,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    method: str = "BCa",
) -> Estimate:
    """Mean over seeds with its bootstrap CI (see `bootstrap_ci` for n = 1 and constant inputs)."""
    return bootstrap_ci(
        (values,),
        _mean,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        seed=seed,
        method=method,
    )


def sign_flip_pvalue(diffs: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> float:
    """Two-sided sign-flip permutation p-value for H0: the paired differences are symmetric about 0.

    The statistic is the mean difference. With n <= EXACT_MAX_PAIRS pairs all 2**n sign patterns are
    enumerated (exact test); above that, `n_resamples` random patterns estimate p as
    (hits + 1) / (n_resamples + 1). Because the observed pattern is among the 2**n, the smallest exact
    two-sided p is 2 / 2**n: with fewer than 6 seeds (2/32 = 0.0625) p < 0.05 cannot be reached,
    however large the effect; use >= 10 seeds.
    """
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 1 or np.isnan(d).any():
        raise ValueError("diffs: need a one-dimensional array without NaN")
    n = len(d)
    if n == 0:
        return float("nan")
    if n <= EXACT_MAX_PAIRS:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        signs = 1.0 - 2.0 * bits  # row 0 is the observed, all-positive pattern
        exact = True
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_resamples, n))
        exact = False
    null = np.abs(signs @ d) / n
    observed = abs(float(np.ones(n) @ d) / n)
    # Same relative tolerance as scipy.stats.permutation_test, so that equal means computed in a
    # different summation order still count as ties.
    gamma = observed * 100 * np.finfo(float).eps
    hits = int(np.count_nonzero(null >= observed - gamma))
    if exact:
        return hits / len(null)
    return (hits + 1) / (n_resamples + 1)


def cohens_dz(diffs: Sequence[float]) -> float:
    """Cohen's d_z = mean(d) / sd(d) (ddof = 1) of paired differences.

    NaN with fewer than two pairs or when every difference is 0; +-inf when the differences are a
    nonzero constant (an effect with no spread across seeds).
    """
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return float("nan")
    mean = float(d.mean())
    if np.ptp(d) == 0:  # checked exactly: std() of equal floats can be a rounding residue, not 0
        return float("nan") if mean == 0 else float(np.copysign(np.inf, mean))
    return mean / float(d.std(ddof=1))


def paired_comparison(
    a: Sequence[float], b: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> PairedComparison:
    """Compare A and B on matched seeds (a[i] and b[i] come from the same seed).

    Reports the mean difference A - B with a paired bootstrap CI (the bootstrap of the per-seed
    differences), the two-sided sign-flip p-value (exact up to EXACT_MAX_PAIRS seeds; with fewer than 6
    seeds p < 0.05 is impossible) and Cohen's d_z.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("a, b: need two one-dimensional arrays of matched seeds of equal length")
    d = x - y
    return PairedComparison(
        n=len(d),
        mean_a=float(x.mean()) if len(x) else float("nan"),
        mean_b=float(y.mean()) if len(y) else float("nan"),
        diff=mean_ci(d, n_resamples=n_resamples, seed=seed),
        p_value=sign_flip_pvalue(d, n_resamples=n_resamples, seed=seed),
        d_z=cohens_dz(d),
    )


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control across the comparisons given).

    Sorted ascending, p_(i) is multiplied by (m - i + 1), made non-decreasing and capped at 1. NaN
    entries are passed through and do not count towards m.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full_like(p, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    if len(valid) == 0:
        return adjusted
    if ((p[valid] < 0) | (p[valid] > 1)).any():
        raise ValueError("pvalues: must lie in [0, 1]")
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    scaled = p[order] * (m - np.arange(m))
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted
