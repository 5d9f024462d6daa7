"""Hydra multirun sweeps through the launchers: joblib (local parallel) and submitit_local (the path a
SLURM sweep takes, run here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runners.run import PROJECT_ROOT
from runners.runlog import META

TINY = ("env.phase_length=4",)


def sweep(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runners.run", "-m", f"results_dir={cwd}", *TINY, *args],
        capture_output=True, text=True, cwd=cwd, timeout=240,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip


def complete(root, name: str) -> list[str]:
    """`<memory>/seed=<n>` of every complete stream of experiment `name` on controlled drift."""
    metas = sorted((root / "runs" / name / "controlled_drift").glob(f"*/seed=*/{META}"))
    return [f"{m.parent.parent.name}/{m.parent.name}" for m in metas if json.loads(m.read_text())["complete"]]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_small_sweep_runs_under_the_launcher(tmp_path, launcher):
    proc = sweep(tmp_path, f"hydra/launcher={launcher}", "memory=no_memory,tepa_rev", "seeds=[0,1]", f"name={launcher}")
    assert proc.returncode == 0, proc.stderr
    assert complete(tmp_path, launcher) == ["no_memory/seed=0", "no_memory/seed=1", "tepa_rev/seed=0", "tepa_rev/seed=1"]
    assert "validated against ConfigStore schema" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["hydra", "runs"]  # Hydra's own output stays under results_dir


def test_the_threshold_sweep_gives_each_grid_point_its_own_streams(tmp_path):
    proc = sweep(tmp_path, "experiment=sweep_thresholds", "memory.theta_rev=0.3,0.5", "memory.theta_rec=0.5", "seeds=[0]")
    assert proc.returncode == 0, proc.stderr
    assert complete(tmp_path, "sweep_thresholds") == [
        "tepa_rev-theta_rev=0.3-theta_rec=0.5/seed=0",
        "tepa_rev-theta_rev=0.5-theta_rec=0.5/seed=0",
    ]
