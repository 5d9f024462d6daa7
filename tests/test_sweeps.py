"""Hydra multirun sweeps through the launchers: joblib (local parallel) and submitit_local (the path a
SLURM sweep takes, run here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from analysis.streamlog.stream import META
from runners.run import PROJECT_ROOT

TINY = ("env.phase_length=4",)
VARIANT = "env.phase_length=4"  # the directory level that names TINY's difference from the defaults


def sweep(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runners.run", "-m", f"results_dir={cwd}", *TINY, *args],
        capture_output=True, text=True, cwd=cwd, timeout=240,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip


def complete(root, name: str) -> list[str]:
    """`<memory>/seed=<n>` of every complete stream of experiment `name` on controlled drift."""
    metas = sorted((root / "runs" / name / "controlled_drift").glob(f"*/{VARIANT}/seed=*/{META}"))
    return [f"{m.parents[2].name}/{m.parent.name}" for m in metas if json.loads(m.read_text())["complete"]]


def test_a_threshold_sweep_runs_in_parallel_under_joblib(tmp_path):
    proc = sweep(
        tmp_path,
        "hydra/launcher=joblib",
        "experiment=sweep_thresholds",
        "memory.theta_rev=0.3,0.5",
        "memory.theta_rec=0.5",
        "seeds=[0,1]",
    )
    assert proc.returncode == 0, proc.stderr
    assert "n_jobs=2" in proc.stdout  # the project's joblib default
    assert complete(tmp_path, "sweep_thresholds") == [
        f"tepa_rev-theta_rev={r}-theta_rec=0.5/seed={s}" for r in ("0.3", "0.5") for s in (0, 1)
    ]
    assert "validated against ConfigStore schema" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["hydra", "runs"]  # Hydra's own output stays under results_dir


def test_a_small_sweep_runs_under_submitit_local(tmp_path):
    proc = sweep(tmp_path, "hydra/launcher=submitit_local", "memory=no_memory,tepa_rev", "seed=0", "name=sl")
    assert proc.returncode == 0, proc.stderr
    assert complete(tmp_path, "sl") == ["no_memory/seed=0", "tepa_rev/seed=0"]
    assert sorted(os.listdir(tmp_path)) == ["hydra", "runs"]
