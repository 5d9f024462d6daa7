"""The MPI bars are handed to the drawing processes as soon as the MPI exists, before the slower
metrics: what they are drawn from must be what the finished analysis holds."""

import pandas as pd

import analysis.metrics.compute as compute
from analysis.data.load import load_runs
from analysis.metrics.compute import analyse
from tests.test_analysis_outputs import runs_root  # noqa: F401  (runs_root: the shared fixture)


def test_the_mpi_handed_over_early_is_the_finished_analysis_own(runs_root):  # noqa: F811
    handed = []
    fresh = analyse(load_runs(runs_root), window=10, mpi_ready=lambda *metrics: handed.append(metrics))
    [(mpi, phases, variants)] = handed
    assert not mpi.empty
    pd.testing.assert_frame_equal(mpi, fresh.mpi, check_exact=True)
    assert phases == fresh.phases and variants == fresh.variants


def test_the_mpi_is_handed_over_before_the_slower_metrics_are_computed(runs_root, monkeypatch):  # noqa: F811
    order = []
    adaptation = compute.adaptation

    def noted(*args, **kwargs):
        order.append("adaptation")
        return adaptation(*args, **kwargs)

    monkeypatch.setattr(compute, "adaptation", noted)
    analyse(load_runs(runs_root), window=10, mpi_ready=lambda *metrics: order.append("mpi"))
    assert order == ["mpi", "adaptation"]
