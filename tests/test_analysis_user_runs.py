"""The analysis on a user's own runs rather than the paper's: a folder holding only a sweep, runs of a
configuration that is not the paper experiment's, and an `--out` that already holds other results."""

from __future__ import annotations

import pandas as pd

from analysis.__main__ import main
from tests.test_analysis_outputs import PHASES, write_run


def sweep_runs(root, seeds=(0, 1)):
    """A threshold sweep as the runner writes it: the grid point in the memory label and the config."""
    for theta_rev in (0.3, 0.5):
        label = f"tepa_rev-theta_rev={theta_rev}-theta_rec=0.5"
        memory = {"_target_": "tepa.tepa_rev.TEPARev", "label": label, "theta_rev": theta_rev}
        for seed in seeds:
            config = {"memory": memory, "seed": seed}
            write_run(root, "sweep_thresholds", "controlled_drift", label, seed, phases=PHASES, config=config)


def test_a_folder_holding_only_a_sweep_is_analysed_with_its_success_per_phase(tmp_path):
    sweep_runs(tmp_path / "runs")
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 0
    sweep = pd.read_csv(out / "tables" / "sweep_sweep_thresholds.csv")
    assert list(dict.fromkeys(sweep["phase"])) == [*(p for p, _ in PHASES), "overall"]
    table = (out / "tables" / "sweep_sweep_thresholds.md").read_text()
    assert "| Setting | Method | theta_rev | stable | full_reversal | partial_reversal | return | overall |" in table
    assert "(n=2, no CI)" in table
