"""The rule-switch ablation: regimes and re-promotion delays from logs, and the experiment end to end
through the real runner and `python -m analysis`."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from analysis.report.ablation import StateLog, regimes, return_delays, run_delays
from runners.run import PROJECT_ROOT


def test_regimes_fold_a_one_episode_blip_into_its_regime():
    assert regimes(list("aaabaaccc")) == [(0, 6), (6, 9)]
    assert regimes(list("aabbaa")) == [(0, 2), (2, 4), (4, 6)]
    assert regimes([]) == []


def test_a_return_is_timed_from_the_regime_start_to_the_first_episode_ending_active():
    episodes = pd.DataFrame(
        {"t": range(8), "key": ["k"] * 8, "correct": ["a", "a", "b", "b", "b", "a", "a", "a"]}
    )
    log = StateLog(
        [
            (0, "k", "a", "hypothesis"),
            (0, "k", "a", "active"),
            (3, "k", "a", "revoked"),
            (6, "k", "a", "active"),  # re-promoted at the second episode of the return
            (6, "k", "a", "revoked"),  # ... and revoked within the same update: not back yet
            (7, "k", "a", "active"),
        ]
    )
    assert return_delays(episodes, log) == [3]


def test_a_return_never_repromoted_within_its_regime_is_not_back():
    episodes = pd.DataFrame({"t": range(6), "key": ["k"] * 6, "correct": list("aabbaa")})
    log = StateLog([(0, "k", "a", "active"), (2, "k", "a", "revoked")])
    assert return_delays(episodes, log) == [None]


def test_the_ablation_experiment_runs_its_arms_and_the_report_shows_the_delay(tmp_path):
    proc = subprocess.run(
        [
            sys.executable, "-m", "runners.run", "-m", f"results_dir={tmp_path}",
            "experiment=ablation_lifecycle", "env=controlled_drift", "env.phase_length=100",
            "lifecycle=default,revoked_conflicts,literal", "seeds=[0]", "progress=false",
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=240,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    arms = sorted(p.name for p in (tmp_path / "runs" / "ablation_lifecycle" / "controlled_drift").iterdir())
    assert arms == ["tepa_rev", "tepa_rev-revoked_counts_conflicts=true", "tepa_rev_literal"]
    assert analysis_main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    table = pd.read_csv(tmp_path / "out" / "tables" / "ablation_lifecycle.csv")
    assert list(table["arm"]) == arms
    by_arm = table.set_index("arm")
    assert by_arm.loc["tepa_rev", "back"] == by_arm.loc["tepa_rev", "returns"] > 0
    assert by_arm.loc["tepa_rev_literal", "back"] < by_arm.loc["tepa_rev_literal", "returns"]
    page = (tmp_path / "out" / "ablation_lifecycle.md").read_text()  # the experiment's own page
    assert "TEPA-Rev's rule switches: per-phase success and re-promotion delay" in page
    assert "(ablation_lifecycle.md)" in (tmp_path / "out" / "README.md").read_text()


def test_a_garbled_archive_stops_the_ablation_table_with_one_line_naming_the_file(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    pd.DataFrame({"t": [0, 1], "key": ["k", "k"], "correct": ["a", "a"]}).to_parquet(run / "episodes.parquet")
    (run / "archive.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"archive.jsonl: not a lifecycle log") as err:
        run_delays(tmp_path, "r")
    assert "\n" not in str(err.value)
