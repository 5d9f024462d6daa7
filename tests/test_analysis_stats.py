"""analysis.stats against hand-computed cases and against scipy itself."""

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats import (
    N_RESAMPLES,
    bootstrap_ci,
    bootstrap_pvalue,
    bootstrap_pvalues,
    cohens_dz,
    holm,
    mean_ci,
    paired_comparison,
    sign_flip_pvalue,
    two_level_mean_cis,
)

VALUES = [0.31, 0.28, 0.35, 0.30, 0.27, 0.33, 0.29, 0.32, 0.36, 0.26]


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_mean_ci_equals_scipy_bootstrap_with_same_seed(method):
    ours = mean_ci(VALUES, n_resamples=2000, seed=7, method=method)
    theirs = scipy.stats.bootstrap(
        (np.array(VALUES),), np.mean, n_resamples=2000, method=method, rng=np.random.default_rng(7)
    ).confidence_interval
    assert ours.mean == pytest.approx(np.mean(VALUES))
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=1e-12)
    assert ours.n == 10
    assert ours.low < ours.mean < ours.high


def test_mean_ci_is_deterministic_and_seed_dependent():
    values = np.random.default_rng(0).normal(0.5, 0.1, 8)
    assert mean_ci(values) == mean_ci(values)
    assert mean_ci(values, seed=1) != mean_ci(values, seed=2)


def test_mean_ci_degenerate_inputs():
    single = mean_ci([0.4])
    assert single.mean == 0.4 and math.isnan(single.low) and math.isnan(single.high) and single.n == 1
    empty = mean_ci([])
    assert math.isnan(empty.mean) and empty.n == 0
    constant = mean_ci([0.25, 0.25, 0.25])
    assert (constant.mean, constant.low, constant.high) == (0.25, 0.25, 0.25)


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="confidence_level"):
        mean_ci(VALUES, confidence_level=1.5)
    with pytest.raises(ValueError, match="n_resamples"):
        mean_ci(VALUES, n_resamples=0)
    with pytest.raises(ValueError, match="NaN"):
        mean_ci([0.1, float("nan")])
    with pytest.raises(ValueError, match="a, b"):
        paired_comparison([1.0, 2.0], [1.0])


def test_paired_ratio_bootstrap_equals_scipy():
    ref = np.array([0.30, 0.31, 0.29, 0.33, 0.31])
    other = np.array([0.20, 0.22, 0.19, 0.23, 0.21])

    def ratio(a, b, axis=-1):
        return (np.mean(a, axis=axis) - np.mean(b, axis=axis)) / np.mean(a, axis=axis)

    ours = bootstrap_ci((ref, other), ratio, paired=True, n_resamples=3000, seed=3)
    theirs = scipy.stats.bootstrap(
        (ref, other), ratio, paired=True, vectorized=True, n_resamples=3000, rng=np.random.default_rng(3)
    ).confidence_interval
    assert ours.mean == pytest.approx((ref.mean() - other.mean()) / ref.mean())
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=1e-12)


def test_sign_flip_hand_computed():
    # All differences positive: only the observed pattern and its mirror reach |mean| -> p = 2 / 2**n.
    assert sign_flip_pvalue([0.1, 0.2, 0.3]) == pytest.approx(2 / 8)
    assert sign_flip_pvalue([0.1] * 5) == pytest.approx(0.0625)  # 5 seeds: p < 0.05 is impossible
    assert sign_flip_pvalue([0.1] * 6) == pytest.approx(0.03125)
    # d = (1, -1): patterns give means 0, 1, -1, 0 -> |mean| >= 0 always.
    assert sign_flip_pvalue([1.0, -1.0]) == 1.0
    # d = (1, 3): means 2, -1, 1, -2 -> |mean| >= 2 in two of four.
    assert sign_flip_pvalue([1.0, 3.0]) == pytest.approx(0.5)
    assert sign_flip_pvalue([0.0, 0.0, 0.0]) == 1.0
    assert math.isnan(sign_flip_pvalue([]))


@pytest.mark.parametrize("seed", range(6))
def test_sign_flip_exact_equals_scipy_permutation_test(seed):
    rng = np.random.default_rng(seed)
    n = 4 + seed
    a = rng.normal(0.5, 0.1, n).round(2)
    b = (a - rng.normal(0.03 * seed, 0.05, n)).round(2)
    theirs = scipy.stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
    ).pvalue
    assert sign_flip_pvalue(a - b) == pytest.approx(theirs, abs=1e-12)


def brute_force_sign_flip(d):
    """Every sign pattern as a row, as the definition reads (small n only)."""
    n = len(d)
    signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)
    null, observed = np.abs(signs @ d) / n, abs(d.mean())
    return np.count_nonzero(null >= observed - observed * 100 * np.finfo(float).eps) / 2**n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-40, 40), min_size=1, max_size=12))
def test_sign_flip_counting_in_halves_equals_enumerating_every_pattern(steps):
    d = np.array(steps) / 256  # exact in binary, so sums are exact and ties are real ties
    assert sign_flip_pvalue(d) == brute_force_sign_flip(d)


def test_a_mean_that_is_a_rounding_residue_of_zero_counts_every_pattern_once():
    d = np.array([-29, 30, -1]) / 400  # sums to about 1e-18, not 0, in binary floating point
    assert sign_flip_pvalue(d) == brute_force_sign_flip(d) == 1.0


def test_sign_flip_is_exact_at_twenty_seeds_and_equals_scipy():
    assert sign_flip_pvalue(np.full(20, 0.7)) == 2 / 2**20
    assert sign_flip_pvalue(np.r_[np.full(19, 0.7), -0.01]) == 4 / 2**20  # also the pattern flipping it
    d = np.random.default_rng(3).normal(0.1, 0.3, 16).round(3)
    theirs = scipy.stats.permutation_test(
        (d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples", n_resamples=np.inf
    ).pvalue
    assert sign_flip_pvalue(d) == pytest.approx(theirs, abs=1e-12)


def test_sign_flip_monte_carlo_above_exact_limit():
    rng = np.random.default_rng(0)
    d = rng.normal(0.05, 0.2, 30)
    ours = sign_flip_pvalue(d, n_resamples=9999, seed=1)
    assert ours == sign_flip_pvalue(d, n_resamples=9999, seed=1)
    theirs = scipy.stats.permutation_test(
        (d,),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=9999,
        rng=np.random.default_rng(2),
    ).pvalue
    assert ours == pytest.approx(theirs, abs=0.03)
    assert 1 / 10000 <= ours <= 1


def test_holm_by_hand():
    # Sorted: 0.01*4 = 0.04; 0.03*3 = 0.09; 0.04*2 = 0.08 -> monotone 0.09; 0.20*1 = 0.20.
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.02, float("nan"), 0.04])  # NaN ignored: m = 2
    assert (
        adjusted[0] == pytest.approx(0.04) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    )
    assert len(holm([])) == 0
    with pytest.raises(ValueError, match="pvalues"):
        holm([1.5])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_properties(pvalues):
    p = np.array(pvalues)
    adjusted = holm(p)
    assert (adjusted >= p - 1e-15).all() and (adjusted <= 1).all()
    order = np.argsort(p, kind="stable")
    assert (np.diff(adjusted[order]) >= -1e-15).all()


def test_cohens_dz_is_finite_or_nan():
    assert cohens_dz([1.0, 2.0, 3.0]) == pytest.approx(2.0)  # mean 2, sd 1
    assert math.isnan(cohens_dz([0.1, 0.1, 0.1]))  # no spread: undefined, never inf
    assert math.isnan(cohens_dz([-0.1, -0.1]))
    assert math.isnan(cohens_dz([0.0, 0.0]))
    assert math.isnan(cohens_dz([0.3]))


def test_paired_comparison_combines_the_parts():
    a = np.array([0.95, 0.93, 0.96, 0.94, 0.97, 0.92, 0.95, 0.96])
    b = np.array([0.21, 0.20, 0.25, 0.19, 0.22, 0.18, 0.23, 0.20])
    result = paired_comparison(a, b)
    assert result.n == 8
    assert result.mean_a == pytest.approx(a.mean()) and result.mean_b == pytest.approx(b.mean())
    assert result.diff == mean_ci(a - b)
    assert result.p_value == pytest.approx(2 / 2**8)
    assert result.d_z == pytest.approx(cohens_dz(a - b))


# ------------------------------------------------------------------ paired bootstrap p-value


def test_bootstrap_pvalue_equals_the_centred_scipy_bootstrap_distribution():
    diffs = np.random.default_rng(1).normal(0.1, 0.3, 12)
    res = scipy.stats.bootstrap(
        (diffs,), np.mean, n_resamples=999, method="percentile", rng=np.random.default_rng(3)
    )
    observed = diffs.mean()
    expected = (1 + np.sum(np.abs(res.bootstrap_distribution - observed) >= abs(observed))) / 1000
    assert bootstrap_pvalue(diffs, n_resamples=999, seed=3) == pytest.approx(expected)


def test_bootstrap_pvalue_of_two_pairs_is_the_chance_a_centred_resample_reaches_the_mean():
    # d = (0, 2): centred (-1, 1); a resample's mean is -1, 0 or 1 with chances 1/4, 1/2, 1/4, and
    # |mean| >= 1 happens half the time.
    assert bootstrap_pvalue([0.0, 2.0], n_resamples=40000) == pytest.approx(0.5, abs=0.01)


def test_bootstrap_pvalue_hand_cases_without_spread():
    assert bootstrap_pvalue([0.0, 0.0, 0.0]) == 1.0
    assert bootstrap_pvalue([0.3, 0.3, 0.3], n_resamples=999) == 1 / 1000
    assert math.isnan(bootstrap_pvalue([]))


def test_bootstrap_pvalue_goes_below_the_exact_tests_floor_for_a_clear_effect():
    diffs = [0.7, 0.72, 0.65, 0.69, 0.71, 0.8, 0.6, 0.7, 0.75, 0.68]
    assert sign_flip_pvalue(diffs) == 2 / 2**10
    assert bootstrap_pvalue(diffs) == 1 / (N_RESAMPLES + 1)


def test_bootstrap_pvalue_is_large_for_noise_and_batched_equals_one_by_one():
    rng = np.random.default_rng(5)
    cells = [rng.normal(0, 1, 10) for _ in range(4)] + [rng.normal(0, 1, 7)]
    one_by_one = [bootstrap_pvalue(c, n_resamples=500) for c in cells]
    assert bootstrap_pvalues(cells, n_resamples=500) == one_by_one
    assert paired_comparison(cells[0], np.zeros(10), n_resamples=500).p_bootstrap == one_by_one[0]
    null_ps = [bootstrap_pvalue(rng.normal(0, 1, 20), n_resamples=500) for _ in range(200)]
    assert 0.02 < np.mean(np.array(null_ps) < 0.05) < 0.12  # about the nominal 5% under H0


# ------------------------------------------------------------------ two-level bootstrap


def test_two_level_interval_of_one_seed_is_the_episode_bootstrap():
    episodes = [1] * 30 + [0] * 10
    (ours,) = two_level_mean_cis([[episodes]], n_resamples=4000, seed=2)
    theirs = scipy.stats.bootstrap(
        (np.array(episodes, float),),
        np.mean,
        n_resamples=4000,
        method="percentile",
        rng=np.random.default_rng(2),
    ).confidence_interval
    assert ours.mean == 0.75 and ours.n == 1
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=0.03)


def test_two_level_spread_adds_episode_noise_to_seed_noise():
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.3, 0.7, 10)
    cell = [(rng.random(200) < p).astype(float) for p in rates]
    observed = np.array([c.mean() for c in cell])
    s, n = len(cell), 200
    # Variance of the two-level bootstrap mean: (between-seed variance + mean within-seed variance) / S.
    expected_sd = math.sqrt((observed.var() + np.mean(observed * (1 - observed) / n)) / s)
    (ours,) = two_level_mean_cis([cell], n_resamples=20000)
    assert (ours.high - ours.low) / (2 * 1.96) == pytest.approx(expected_sd, rel=0.05)
    seeds_only = mean_ci(observed, method="percentile")
    assert ours.high - ours.low > seeds_only.high - seeds_only.low


def test_two_level_degenerate_and_bad_cells():
    (certain,) = two_level_mean_cis([[[1, 1], [1, 1, 1]]])
    assert (certain.mean, certain.low, certain.high) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="cells\\[0\\]: episode outcomes must be 0 or 1"):
        two_level_mean_cis([[[0.5, 1.0]]])
