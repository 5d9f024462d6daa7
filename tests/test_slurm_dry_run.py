"""SLURM without a cluster: a SLURM launch where there is no SLURM, none that answers or no such partition
stops with one line before submitting, `plan=true` prints the sbatch script the launch would submit, and
submitit_local leaves no literal `%j` folder behind."""

from __future__ import annotations

import os
import stat

import pytest

from runners.config import ConfigError
from runners.launch.slurm_script import check_slurm_available
from tests.helpers.runner import cli

SLURM = ("-m", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=debug", "memory=lww,tepa_rev")


def no_slurm(tmp_path) -> dict[str, str]:
    """An environment whose PATH holds no `sbatch` (nor `srun`): an empty folder."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    return {"PATH": str(empty)}


def test_a_slurm_sweep_without_sbatch_on_path_stops_with_one_line_before_submitting(tmp_path):
    proc = cli(tmp_path, *SLURM, "seed=0", f"results_dir={tmp_path / 'results'}", env=no_slurm(tmp_path))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no SLURM" in lines[0] and "sbatch" in lines[0]
    assert "hydra/launcher=submitit_local" in lines[0] and "plan=true" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()  # nothing was written, let alone submitted


def fake_slurm(bin_dir, sinfo: str = "echo 'debug*'; echo big") -> None:
    """`sbatch`, `srun` and `sinfo` scripts in `bin_dir`; `sinfo` runs the shell code `sinfo`."""
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("sbatch", "exit 0"), ("srun", "exit 0"), ("sinfo", sinfo)):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_sbatch_srun_and_sinfo_on_path_let_a_slurm_sweep_through_the_check(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_slurm(bin_dir)
    monkeypatch.setenv("PATH", str(bin_dir))
    check_slurm_available(SLURM)  # no error: the partition is the default one
    check_slurm_available((*SLURM, "hydra.launcher.partition=big,debug"))
    (bin_dir / "sbatch").unlink()
    with pytest.raises(ConfigError, match="no sbatch on PATH"):
        check_slurm_available(SLURM)
    check_slurm_available(SLURM[1:])  # without -m the launcher is not used


def test_a_partition_sinfo_does_not_list_stops_a_slurm_sweep_with_one_line(tmp_path, monkeypatch):
    fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ConfigError, match=r"has no partition gpu \(sinfo lists debug, big\)"):
        check_slurm_available((*SLURM, "hydra.launcher.partition=gpu"))
    check_slurm_available((*SLURM, "hydra.launcher.partition=null"))  # the cluster's default


def test_a_slurm_that_does_not_answer_stops_a_slurm_sweep_with_sinfos_last_line(tmp_path, monkeypatch):
    failing = "echo 'sinfo: error: dns srv lookup' >&2; echo 'sinfo: fatal: no config source' >&2; exit 1"
    fake_slurm(tmp_path / "bin", sinfo=failing)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ConfigError, match=r"SLURM does not answer here \(sinfo: fatal: no config source\)"):
        check_slurm_available(SLURM)


def test_a_slurm_dry_run_prints_the_array_script_with_partition_and_python_command(tmp_path):
    proc = cli(tmp_path, *SLURM, "seed=0", "env.phase_length=4", "plan=true", env=no_slurm(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("plan ") < out.index("#!/bin/bash")  # the script follows the plan lines
    assert "#SBATCH --array=0-1%" in out
    assert "#SBATCH --partition=debug" in out
    assert "#SBATCH --job-name=run" in out
    assert "-u -m submitit.core._submit" in out and "python" in out
    assert "task 0: hydra/launcher=submitit_slurm memory=lww seed=0" in out
    assert "task 1: hydra/launcher=submitit_slurm memory=tepa_rev seed=0" in out
    assert os.listdir(tmp_path) == ["bin"]  # a plan writes nothing


def test_a_submitit_local_sweep_leaves_no_literal_percent_j_folder(tmp_path):
    pytest.importorskip("submitit", reason="the submitit launcher plugin is not installed")
    args = ("-m", f"results_dir={tmp_path}", "env.phase_length=4", "hydra/launcher=submitit_local")
    proc = cli(tmp_path, *args, "memory=no_memory,lww", "seed=0", "name=sl", timeout=240)
    assert proc.returncode == 0, proc.stderr
    submitit = list(tmp_path.glob("hydra/sl/multirun_*/.submitit"))
    assert len(submitit) == 1
    assert not [p for p in tmp_path.rglob("*") if p.name == "%j"]
    assert len(list(submitit[0].rglob("*_0_log.out"))) == 2  # each job's log is there, named by its id
