"""Statistics over seeds: bootstrap confidence intervals, paired sign-flip and bootstrap tests, Holm
correction, and an optional two-level (seeds, then episodes) bootstrap.

The unit of replication is the seed: every estimate here takes one value per seed (a run's success rate,
say), because episodes within a run are not independent. The two-level bootstrap
(`two_level_mean_cis`) keeps seeds as the outer unit and resamples episodes within each drawn seed, so
that the interval also carries episode-level noise.

All randomness is seeded (`seed`, fixed `n_resamples`), so the same inputs give the same intervals and
p-values on every machine and every rerun; the tables built from them are byte-identical.

Intervals are computed for many cells at once (`bootstrap_cis`, `mean_cis`, `paired_comparisons`): a
fresh generator with the same seed draws the same resample indices for every cell of a given size, so
they are drawn once and applied to all those cells together, which gives each cell exactly the numbers
of `scipy.stats.bootstrap` on that cell alone (the tests check this to the last bit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

CONFIDENCE_LEVEL = 0.95
N_RESAMPLES = 9999
SEED = 0
#: Largest number of pairs for which the sign-flip null distribution is enumerated exactly (2**24 sign
#: patterns, counted without materialising them: `_sign_flip_hits`); above it the test draws
#: `n_resamples` random sign patterns.
EXACT_MAX_PAIRS = 24
METHODS = ("bca", "percentile", "basic")
#: Fewest seeds for which the analysis reports a bootstrap interval, a paired bootstrap p or d_z. With n
#: seeds the bootstrap can draw only C(2n-1, n) distinct resamples (3 with 2 seeds, 126 with 5, 1716 with
#: 7): below 8 (6435) its 9999 draws repeat a few hundred values, its percentile intervals are too narrow
#: and its p falls below 2 / 2**n, the smallest p any exact test on n paired seeds can honestly give (with
#: 2 seeds the paired bootstrap said p < 0.001 where the exact sign-flip test says 0.5). From 8 seeds the
#: distinct resamples are about as many as the draws and the exact test itself reaches 2 / 2**8 < 0.01.
MIN_BOOTSTRAP_SEEDS = 8
#: Fewest seeds with which the exact sign-flip test can reach p < 0.05 (2 / 2**6 = 0.031; 2 / 2**5 = 0.0625).
MIN_SIGN_FLIP_SEEDS = 6
#: Resampled values per batch of cells (2**22 floats, 32 MB per array): bounds the memory of a batch.
_BATCH_VALUES = 2**22


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
    p_bootstrap: float = float("nan")


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


def _jackknife_indices(n: int) -> np.ndarray:
    """Row k: the indices 0 .. n-1 without k (as scipy's jackknife builds them)."""
    return np.broadcast_to(np.arange(n), (n, n))[~np.eye(n, dtype=bool)].reshape(n, n - 1)


def _resampled(
    data: list[np.ndarray], statistic: Callable, paired: bool, n_resamples: int, seed: int
) -> np.ndarray:
    """The bootstrap distribution of every row, (rows, n_resamples), drawn as scipy draws it.

    `np.take` lays each row's resamples out contiguously, as scipy's indexing does for a single cell:
    numpy sums a non-contiguous row in another order, which can change the last bit.
    """
    rng = np.random.default_rng(seed)
    if paired:
        n = data[0].shape[-1]
        indices = rng.integers(0, n, (n_resamples, n))
        return statistic(*(np.take(sample, indices, axis=-1) for sample in data), axis=-1)
    resamples = []
    for sample in data:  # one draw per sample, in order
        n = sample.shape[-1]
        resamples.append(np.take(sample, rng.integers(0, n, (n_resamples, n)), axis=-1))
    return statistic(*resamples, axis=-1)


def _jackknife(data: list[np.ndarray], statistic: Callable, paired: bool) -> list[np.ndarray]:
    """Leave-one-out statistics of every row, one (rows, n_j) array per resampled sample."""
    if paired:
        indices = _jackknife_indices(data[0].shape[-1])
        return [statistic(*(np.take(sample, indices, axis=-1) for sample in data), axis=-1)]
    thetas = []
    for j, sample in enumerate(data):
        indices = _jackknife_indices(sample.shape[-1])
        samples = [s[:, None, :] for s in data]
        samples[j] = np.take(sample, indices, axis=-1)
        shape = (sample.shape[0], len(indices))
        thetas.append(statistic(*(np.broadcast_to(s, shape + s.shape[-1:]) for s in samples), axis=-1))
    return thetas


def _bca_levels(
    data: list[np.ndarray], statistic: Callable, paired: bool, theta_b: np.ndarray, alpha: float
) -> np.ndarray:
    """The BCa interval's quantile levels of every row, (rows, 2), with scipy's formulas.

    The acceleration's power is taken per row on scalars, as scipy takes it for a single cell: numpy's
    vectorised power can differ from the scalar one in the last bit. scipy.special is imported here, by
    the first interval: the analysis then imports it while its drawing process works, not before it
    reads any log.
    """
    from scipy.special import ndtr, ndtri

    theta_hat = statistic(*data, axis=-1)[:, None]
    below = np.count_nonzero(theta_b < theta_hat, axis=-1) + np.count_nonzero(theta_b <= theta_hat, axis=-1)
    z0 = ndtri(below.astype(theta_hat.dtype) / (2 * theta_b.shape[-1]))
    nums, dens = 0, 0
    for theta_i in _jackknife(data, statistic, paired):
        n = float(theta_i.shape[-1])
        u = (n - 1) * (np.mean(theta_i, axis=-1, keepdims=True) - theta_i)
        nums = nums + np.sum(u**3, axis=-1) / n**3
        dens = dens + np.sum(u**2, axis=-1) / n**2
    a_hat = 1 / 6 * nums / np.array([d ** (3 / 2) for d in dens])
    z_alpha = float(ndtri(alpha))
    levels = []
    for z in (z_alpha, -z_alpha):
        shifted = z0 + z
        levels.append(ndtr(z0 + shifted / (1 - a_hat * shifted)))
    return np.stack(levels, axis=-1)


def _quantiles(values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """`scipy.stats.quantile(values, levels, axis=-1)` (its default "linear" method, NaNs propagated),
    spelled out so that the analysis does not import scipy.stats (a second of start-up)."""
    y = np.sort(values, axis=-1)
    n = float(y.shape[-1])
    invalid = (levels > 1) | (levels < 0) | np.isnan(levels)
    p = np.where(invalid, 0.5, levels)
    jg = p * n + (1 - p)
    jp1 = jg // 1
    j = jp1 - 1
    g = np.where(j < 0, 0.0, jg % 1)
    below = np.take_along_axis(y, np.clip(j, 0.0, n - 1).astype(np.int64), axis=-1)
    above = np.take_along_axis(y, np.clip(jp1, 0.0, n - 1).astype(np.int64), axis=-1)
    result = (1 - g) * below + g * above
    result[invalid | np.isnan(values).any(axis=-1, keepdims=True)] = np.nan
    return result


def _batch_intervals(
    data: list[np.ndarray],
    statistic: Callable,
    *,
    paired: bool,
    confidence_level: float,
    n_resamples: int,
    seed: int,
    method: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of every row of `data` (each sample stacked as rows x n), as scipy.stats.bootstrap
    computes the interval of one row."""
    theta_b = _resampled(data, statistic, paired, n_resamples, seed)
    alpha = (1 - confidence_level) / 2
    if method == "bca":
        levels = _bca_levels(data, statistic, paired, theta_b, alpha)
    else:
        levels = np.broadcast_to(np.array([alpha, 1 - alpha]), (len(theta_b), 2))
    ci = _quantiles(theta_b, levels)
    low, high = ci[..., 0], ci[..., 1]
    if method == "basic":
        theta_hat = statistic(*data, axis=-1)
        low, high = 2 * theta_hat - high, 2 * theta_hat - low
    return low, high


def _batches(cells: list[list[np.ndarray]], estimates: list[Estimate], n_resamples: int) -> list[list[int]]:
    """Indices of the cells to resample, grouped by sample lengths and cut to bound the memory."""
    by_lengths: dict[tuple[int, ...], list[int]] = {}
    for i, (arrays, estimate) in enumerate(zip(cells, estimates, strict=True)):
        if estimate.n >= 2 and any(np.ptp(a) != 0 for a in arrays):
            by_lengths.setdefault(tuple(len(a) for a in arrays), []).append(i)
    batches = []
    for lengths, members in by_lengths.items():
        rows = max(1, _BATCH_VALUES // (n_resamples * sum(lengths)))
        batches += [members[start : start + rows] for start in range(0, len(members), rows)]
    return batches


def _validated(items: Sequence[Sequence[Sequence[float]]], paired: bool) -> list[list[np.ndarray]]:
    cells = [_as_samples(samples) for samples in items]
    if paired and any(len(a) != len(arrays[0]) for arrays in cells for a in arrays):
        raise ValueError("samples: paired samples must have equal lengths")
    return cells


def bootstrap_cis(
    items: Sequence[Sequence[Sequence[float]]],
    statistic: Callable[..., np.ndarray],
    *,
    paired: bool = False,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    method: str = "BCa",
) -> list[Estimate]:
    """`bootstrap_ci` of every item (a sequence of samples), identical to one call per item.

    Items whose samples have the same lengths are resampled together, in batches of bounded memory:
    every batch draws from a fresh generator seeded with `seed`, so each item sees the resample indices
    that `scipy.stats.bootstrap` would draw for it alone, and the resamples are drawn once per batch
    instead of once per cell.
    """
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level: must be in (0, 1), got {confidence_level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples: must be >= 1, got {n_resamples}")
    if method.lower() not in METHODS:
        raise ValueError(f"method: must be one of {', '.join(METHODS)}, got {method!r}")
    cells = _validated(items, paired)
    estimates = [_unresampled(arrays, statistic) for arrays in cells]
    for batch in _batches(cells, estimates, n_resamples):
        low, high = _batch_intervals(
            [np.stack(samples) for samples in zip(*(cells[i] for i in batch), strict=True)],
            statistic,
            paired=paired,
            confidence_level=float(confidence_level),
            n_resamples=n_resamples,
            seed=seed,
            method=method.lower(),
        )
        for row, i in enumerate(batch):
            estimates[i] = replace(estimates[i], low=float(low[row]), high=float(high[row]))
    return estimates


def _unresampled(arrays: list[np.ndarray], statistic: Callable) -> Estimate:
    """The estimate of a cell without resampling, final unless n >= 2 and some sample varies.

    With fewer than two values the interval is NaN (a single seed says nothing about spread); when
    every sample is constant it collapses to the point estimate (BCa would otherwise return NaN).
    """
    n = min(len(a) for a in arrays)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    point = float(statistic(*arrays, axis=-1))
    if n < 2:
        return Estimate(point, float("nan"), float("nan"), n)
    return Estimate(point, point, point, n)


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
    """Point estimate and bootstrap CI of `statistic(*samples, axis=-1)`, as `scipy.stats.bootstrap`.

    `statistic` must be vectorised (accept `axis`). With `paired=True` the samples are resampled
    together (matched seeds). Degenerate inputs are answered without resampling (see
    `_unresampled`).
    """
    return bootstrap_cis(
        [samples],
        statistic,
        paired=paired,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        seed=seed,
        method=method,
    )[0]


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def mean_cis(
    values: Sequence[Sequence[float]],
    *,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    method: str = "BCa",
) -> list[Estimate]:
    """`mean_ci` of each sequence of per-seed values, all cells batched (see `bootstrap_cis`)."""
    return bootstrap_cis(
        [(v,) for v in values],
        _mean,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        seed=seed,
        method=method,
    )


def mean_ci(
    values: Sequence[float],
    *,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    method: str = "BCa",
) -> Estimate:
    """Mean over seeds with its bootstrap CI (see `bootstrap_ci` for n = 1 and constant inputs)."""
    return mean_cis(
        [values], confidence_level=confidence_level, n_resamples=n_resamples, seed=seed, method=method
    )[0]


def sign_flip_pvalue(diffs: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> float:
    """Two-sided sign-flip permutation p-value for H0: the paired differences are symmetric about 0.

    The statistic is the mean difference. With n <= EXACT_MAX_PAIRS pairs all 2**n sign patterns are
    enumerated (exact test); above that, `n_resamples` random patterns estimate p as
    (hits + 1) / (n_resamples + 1). Because the observed pattern is among the 2**n, the smallest exact
    two-sided p is 2 / 2**n: with fewer than 6 seeds (2/32 = 0.0625) p < 0.05 cannot be reached,
    however large the effect; use >= 10 seeds. A mean that is 0 up to rounding gives p = 1.
    """
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 1 or np.isnan(d).any():
        raise ValueError("diffs: need a one-dimensional array without NaN")
    n = len(d)
    if n == 0:
        return float("nan")
    observed = abs(float(np.ones(n) @ d))
    if observed <= n * np.finfo(float).eps * float(np.abs(d).sum()):
        return 1.0  # the mean is 0 up to rounding: every sign pattern reaches it
    reach = observed - _tie_tolerance(observed)
    if n <= EXACT_MAX_PAIRS:
        return _sign_flip_hits(d, reach) / 2**n
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_resamples, n))
    hits = int(np.count_nonzero(np.abs(signs @ d) >= reach))
    return (hits + 1) / (n_resamples + 1)


def _signed_sums(x: np.ndarray) -> np.ndarray:
    """The 2**len(x) sums of +-x_i, one per sign pattern."""
    sums = np.zeros(1)
    for value in x:
        sums = np.concatenate((sums + value, sums - value))
    return sums


def _sign_flip_hits(d: np.ndarray, reach: float) -> int:
    """How many of the 2**n sign patterns give |sum of +-d_i| >= reach, counted by meeting in the middle:
    the patterns of the first half against the sorted sums of the second (2**(n/2) values each)."""
    if reach <= 0:
        return 2 ** len(d)
    first = _signed_sums(d[: len(d) // 2])
    second = np.sort(_signed_sums(d[len(d) // 2 :]))
    start_above = np.searchsorted(second, reach - first, side="left")
    # A tiny `reach` can round both thresholds to the same value: count no pattern twice.
    end_below = np.minimum(np.searchsorted(second, -reach - first, side="right"), start_above)
    return int((len(second) - start_above).sum() + end_below.sum())


def _tie_tolerance(observed: np.ndarray | float) -> np.ndarray | float:
    """Slack under which a resampled statistic counts as reaching the observed one: the relative
    tolerance of scipy.stats.permutation_test, so that equal means summed in another order still tie."""
    return observed * 100 * np.finfo(float).eps


def bootstrap_pvalues(
    diffs: Sequence[Sequence[float]], *, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> list[float]:
    """`bootstrap_pvalue` of every sequence of paired differences, the resamples drawn once per length.

    Each cell of length n sees the resample indices `rng.integers(0, n, (n_resamples, n))` of a fresh
    generator seeded with `seed`: the draws of `scipy.stats.bootstrap` (and of the paired CI) for it.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples: must be >= 1, got {n_resamples}")
    arrays = [_as_samples([d])[0] for d in diffs]
    pvalues = [float("nan")] * len(arrays)
    by_length: dict[int, list[int]] = {}
    for i, d in enumerate(arrays):
        if len(d) == 0:
            continue
        if np.ptp(d) == 0:  # no spread: the centred data are all 0, so is every resampled mean
            pvalues[i] = 1.0 if d[0] == 0 else 1 / (n_resamples + 1)
            continue
        by_length.setdefault(len(d), []).append(i)
    for n, members in by_length.items():
        rows = max(1, _BATCH_VALUES // (n_resamples * n))
        indices = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
        for start in range(0, len(members), rows):
            batch = members[start : start + rows]
            data = np.stack([arrays[i] for i in batch])
            observed = np.mean(data, axis=-1, keepdims=True)
            null = np.mean(np.take(data - observed, indices, axis=-1), axis=-1)
            reach = np.abs(observed) - _tie_tolerance(np.abs(observed))
            hits = np.count_nonzero(np.abs(null) >= reach, axis=-1)
            for row, i in enumerate(batch):
                pvalues[i] = float((hits[row] + 1) / (n_resamples + 1))
    return pvalues


def bootstrap_pvalue(diffs: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> float:
    """Two-sided paired bootstrap p-value for H0: the mean paired difference is 0.

    Method: the null is imposed by centring, d0_i = d_i - mean(d); `n_resamples` resamples of the n
    seeds' centred differences (with replacement) give the null distribution of the mean, and
    p = (1 + #{|mean(d0*)| >= |mean(d)|}) / (n_resamples + 1), so p >= 1 / (n_resamples + 1)
    (1e-4 with the default 9999). Unlike the exact sign-flip test it assumes no symmetry and has no
    floor of 2 / 2**n, but with few seeds it is approximate (the resampled means take few values).
    Differences that are all equal give p = 1 when they are 0, else the floor. NaN without pairs.
    """
    return bootstrap_pvalues([diffs], n_resamples=n_resamples, seed=seed)[0]


def two_level_mean_cis(
    cells: Sequence[Sequence[Sequence[float]]],
    *,
    confidence_level: float = CONFIDENCE_LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> list[Estimate]:
    """Mean over seeds of per-seed success rates, with a two-level percentile bootstrap interval.

    Each cell is a list of seeds, each a sequence of 0/1 episode outcomes. A resample draws the seeds
    with replacement and then, for every drawn seed independently, its episodes with replacement; the
    statistic is the mean over the drawn seeds of their resampled success rates. For 0/1 outcomes a
    resample of n episodes with success rate p has the distribution of Binomial(n, p) / n, which is how
    the episodes are drawn (exactly, and without materialising n indices per seed). The interval is the
    percentile interval (BCa's jackknife has no two-level form); it is never narrower in expectation
    than the seeds-only interval, since it adds the episode-level variance.
    """
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level: must be in (0, 1), got {confidence_level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples: must be >= 1, got {n_resamples}")
    alpha = (1 - confidence_level) / 2
    estimates = []
    for i, cell in enumerate(cells):
        seeds = _as_samples(cell) if len(cell) else []
        if any(((s != 0) & (s != 1)).any() for s in seeds):
            raise ValueError(f"cells[{i}]: episode outcomes must be 0 or 1")
        sizes = np.array([len(s) for s in seeds])
        if not len(seeds) or (sizes == 0).any():
            estimates.append(Estimate(float("nan"), float("nan"), float("nan"), len(seeds)))
            continue
        rates = np.array([s.mean() for s in seeds])
        point = float(rates.mean())
        if np.ptp(rates) == 0 and rates[0] in (0.0, 1.0):  # no spread at either level
            estimates.append(Estimate(point, point, point, len(seeds)))
            continue
        rng = np.random.default_rng(seed)
        drawn = rng.integers(0, len(seeds), (n_resamples, len(seeds)))
        means = (rng.binomial(sizes[drawn], rates[drawn]) / sizes[drawn]).mean(axis=-1)
        low, high = np.quantile(means, [alpha, 1 - alpha])
        estimates.append(Estimate(point, float(low), float(high), len(seeds)))
    return estimates


def cohens_dz(diffs: Sequence[float]) -> float:
    """Cohen's d_z = mean(d) / sd(d) (ddof = 1) of paired differences.

    NaN with fewer than two pairs or when the differences do not vary (all 0, or an effect with no
    spread across seeds, whose standardised size is undefined rather than infinite).
    """
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return float("nan")
    if np.ptp(d) == 0:  # checked exactly: std() of equal floats can be a rounding residue, not 0
        return float("nan")
    return float(d.mean()) / float(d.std(ddof=1))


def paired_comparisons(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> list[PairedComparison]:
    """`paired_comparison` of every (a, b), with the bootstrap CIs of all pairs batched."""
    arrays = []
    for a, b in pairs:
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if x.shape != y.shape or x.ndim != 1:
            raise ValueError("a, b: need two one-dimensional arrays of matched seeds of equal length")
        arrays.append((x, y))
    diffs = [x - y for x, y in arrays]
    cis = mean_cis(diffs, n_resamples=n_resamples, seed=seed)
    boot = bootstrap_pvalues(diffs, n_resamples=n_resamples, seed=seed)
    return [
        PairedComparison(
            n=len(d),
            mean_a=float(x.mean()) if len(x) else float("nan"),
            mean_b=float(y.mean()) if len(y) else float("nan"),
            diff=ci,
            p_value=sign_flip_pvalue(d, n_resamples=n_resamples, seed=seed),
            d_z=cohens_dz(d),
            p_bootstrap=p,
        )
        for (x, y), d, ci, p in zip(arrays, diffs, cis, boot, strict=True)
    ]


def paired_comparison(
    a: Sequence[float], b: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> PairedComparison:
    """Compare A and B on matched seeds (a[i] and b[i] come from the same seed).

    Reports the mean difference A - B with a paired bootstrap CI (the bootstrap of the per-seed
    differences), the two-sided sign-flip p-value (exact up to EXACT_MAX_PAIRS seeds; with fewer than 6
    seeds p < 0.05 is impossible), the paired bootstrap p-value (`bootstrap_pvalue`) and Cohen's d_z.
    """
    return paired_comparisons([(a, b)], n_resamples=n_resamples, seed=seed)[0]


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
