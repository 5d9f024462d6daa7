"""`make figures` after a user's own experiment leaves the committed results as they were: the experiments
`results/manifest.json` lists go to `results/`, every other one to `results/report/` (not committed), and
an experiment joins `results/` only when asked for by name (`EXPERIMENTS=`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.__main__ import main
from analysis.selection import selection
from tests.test_analysis_outputs import write_run

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def _runs(root: Path, experiment: str, memories=("no_memory", "tepa_rev"), seeds=range(2)) -> None:
    for memory in memories:
        for seed in seeds:
            write_run(root, experiment, "controlled_drift", memory, seed)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _make_figures(repo: Path, *variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "figures", f"VENV={VENV}", *variables], cwd=repo, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A project folder whose committed results/ hold one analysed experiment, with runs beside them as
    `make reproduce` leaves them: analysed and committed once per module."""
    if not (VENV / ".installed-stamp").exists():
        pytest.skip("make figures needs the project's venv (run the suite with make test)")
    repo = tmp_path_factory.mktemp("committed") / "project"
    repo.mkdir()
    for name in ("Makefile", ".gitignore", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    os.utime(repo / "pyproject.toml", (0, 0))  # older than the venv's stamp: make installs nothing
    _runs(repo / "results" / "runs", "paper_controlled")
    assert main(["--runs", str(repo / "results" / "runs"), "--out", str(repo / "results"), "--quiet"]) == 0
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    return repo


@pytest.fixture
def clone(committed, tmp_path) -> Path:
    """The test's own copy of `committed` (file times kept: make still installs nothing)."""
    return shutil.copytree(committed, tmp_path / "project")


def test_make_figures_after_a_user_experiment_leaves_the_committed_results_as_they_were(clone):
    _runs(clone / "results" / "runs", "try_noise")
    done = _make_figures(clone)
    assert done.returncode == 0, done.stderr
    assert _git(clone, "status", "--porcelain") == ""
    report = json.loads((clone / "results" / "report" / "manifest.json").read_text())
    assert set(report["experiments"]) == {"try_noise"}
    assert "try_noise" not in (clone / "results" / "README.md").read_text()


def test_an_experiment_named_in_experiments_joins_the_committed_results(clone):
    _runs(clone / "results" / "runs", "try_noise")
    done = _make_figures(clone, "EXPERIMENTS=try_*")
    assert done.returncode == 0, done.stderr
    published = json.loads((clone / "results" / "manifest.json").read_text())
    assert set(published["experiments"]) == {"paper_controlled", "try_noise"}


def test_a_name_that_matches_no_experiment_is_one_line_and_writes_nothing(clone, caplog):
    runs, out = clone / "results" / "runs", clone / "results"
    assert main(["--runs", str(runs), "--out", str(out), "--experiments", "try_typo"]) == 2
    assert "--experiments: no runs of try_typo under" in caplog.text
    assert _git(clone, "status", "--porcelain") == ""


def test_the_selection_takes_the_listed_experiments_and_the_named_ones_but_never_the_excluded(clone):
    results = clone / "results"
    assert selection() is None
    listed = selection(listed_in=results)
    assert listed("paper_controlled") and not listed("try_noise")
    both = selection(["try_*"], listed_in=results)
    assert both("paper_controlled") and both("try_noise") and not both("sweep")
    others = selection(not_listed_in=results)
    assert others("try_noise") and not others("paper_controlled")
