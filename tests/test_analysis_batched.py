"""Batched bootstrap intervals equal scipy.stats.bootstrap on each cell alone, to the last bit.

The tables print intervals to three decimals, but a last-bit difference can still flip a rounded
digit, so the batched path (one draw of resample indices for many cells) must match exactly.
"""

import warnings

import numpy as np
import pytest
import scipy.stats

from analysis import stats
from analysis.metrics.compute import _pollution
from analysis.stats import _mean, bootstrap_cis, mean_cis

N_RESAMPLES = 2000


def _mean_diff(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def _scipy_interval(samples, statistic, paired, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate ratio cells: scipy warns, NaN bounds compare equal
        result = scipy.stats.bootstrap(
            samples,
            statistic,
            paired=paired,
            vectorized=True,
            n_resamples=N_RESAMPLES,
            method=method,
            rng=np.random.default_rng(0),
        )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _cells(n: int, rng: np.random.Generator) -> dict[str, list[tuple]]:
    """Success-like rates (ties), continuous values, paired rates with zeros (inf/NaN ratios), and
    unpaired samples of two lengths."""
    return {
        "mean": [(rng.integers(0, 40, n) / 40,) for _ in range(6)] + [(rng.random(n),) for _ in range(6)],
        "ratio": [(rng.integers(0, 5, n) / 4, rng.integers(0, 5, n) / 4) for _ in range(8)],
        "two": [(rng.random(n), rng.random(n + 3)) for _ in range(4)],
    }


@pytest.mark.parametrize("n", [2, 3, 7, 8, 10, 17])
@pytest.mark.parametrize("method", ["BCa", "percentile", "basic"])
def test_batched_intervals_equal_scipy_per_cell(n, method):
    cells = _cells(n, np.random.default_rng(n))
    for kind, statistic, paired in (
        ("mean", _mean, False),
        ("ratio", _pollution, True),
        ("two", _mean_diff, False),
    ):
        ours = bootstrap_cis(cells[kind], statistic, paired=paired, n_resamples=N_RESAMPLES, method=method)
        for samples, estimate in zip(cells[kind], ours, strict=True):
            if all(np.ptp(s) == 0 for s in samples):
                continue  # answered without resampling
            expected = _scipy_interval(samples, statistic, paired, method)
            np.testing.assert_array_equal(
                (estimate.low, estimate.high), expected, err_msg=f"{kind} {samples}"
            )


def test_many_cells_at_the_analysis_defaults_equal_scipy():
    """A last-bit difference in one step (e.g. numpy's vectorised power) shows in about one cell in
    300 at 9999 resamples: so many cells, as the analysis computes them."""
    rng = np.random.default_rng(1)
    values = [rng.integers(0, 400, 10) / 400 for _ in range(300)] + [rng.random(10) for _ in range(50)]
    for v, estimate in zip(values, mean_cis(values), strict=True):
        expected = scipy.stats.bootstrap((v,), np.mean, rng=np.random.default_rng(0)).confidence_interval
        assert (estimate.low, estimate.high) == (expected.low, expected.high), v


def test_batches_split_by_length_and_memory_bound_give_the_same_numbers(monkeypatch):
    monkeypatch.setattr(stats, "_BATCH_VALUES", 5 * N_RESAMPLES * 12)  # at most 5 cells per batch
    rng = np.random.default_rng(1)
    values = [rng.random(int(n)) for n in rng.integers(2, 12, 40)]
    batched = mean_cis(values, n_resamples=N_RESAMPLES)
    one_by_one = [mean_cis([v], n_resamples=N_RESAMPLES)[0] for v in values]
    assert batched == one_by_one
