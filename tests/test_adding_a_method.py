"""Adding a built-in memory method is one class file plus one YAML file: done here in a copy of the
project, then run through a paper experiment (tiny: `max_episodes`) by the real command line, and analysed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from runners.run import PROJECT_ROOT

PACKAGES = ("tepa", "baselines", "envs", "runners", "analysis", "conf")

# The method: keep the first value seen to hold for each key, never replace it.
CLASS_FILE = '''
"""Keep-First: the first value that held for a key stays, whatever happens later."""

from __future__ import annotations

from collections.abc import Hashable

from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.retrieval.rank import DEFAULT_TOP_K, rank
from tepa.validation import check_int


class KeepFirst:
    name = "keep_first"

    def __init__(self, top_k: int = DEFAULT_TOP_K) -> None:
        self.top_k = check_int("top_k", top_k, 1)
        self._first: dict[Hashable, Evidence] = {}
        self._seen = 0

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        if obs.holds and obs.key not in self._first:
            self._first[obs.key] = Evidence(obs.key, obs.value, True, obs.t, obs.text, obs.source, self._seen)
        self._seen += 1

    def retrieve(self, query: Query) -> list[Evidence]:
        return rank(self._first.values(), query, self.top_k)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        pass

    def on_phase_boundary(self, phase: str, t: int) -> None:
        pass

    def snapshot(self) -> dict:
        return {"hypothesis": 0, "active": len(self._first), "revoked": 0}
'''

YAML_FILE = """
# Keep-First: the first value that held for a key stays.
_target_: baselines.keep_first.KeepFirst
display: {name: Keep-First, rank: 15}
top_k: 8
"""


def _project_with_the_method(root: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "baselines" / "keep_first.py").write_text(textwrap.dedent(CLASS_FILE).lstrip())
    (root / "conf" / "memory" / "keep_first.yaml").write_text(YAML_FILE.lstrip())
    return root


def _python(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run(
        [sys.executable, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_method_added_as_one_class_file_and_one_yaml_runs_in_a_paper_experiment_and_its_tables(tmp_path):
    project = _project_with_the_method(tmp_path / "project")
    results = tmp_path / "results"

    checked = _python(
        project,
        "-c",
        "from tepa import check_memory; from baselines.keep_first import KeepFirst; check_memory(KeepFirst)",
    )
    assert checked.returncode == 0, checked.stderr  # the protocol's properties, before any run

    listed = _python(
        project,
        "-c",
        "from runners.registry import swept_memories; print(swept_memories('paper_controlled'))",
    )
    assert listed.returncode == 0, listed.stderr
    assert "'keep_first'" in listed.stdout  # the paper experiments sweep it with the other methods

    run = _python(
        project, "-m", "runners.run", "-m", "experiment=paper_controlled", "memory=no_memory,keep_first",
        "seeds=[0,1]", "max_episodes=20", f"results_dir={results}", "progress=false",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    for seed in (0, 1):
        method = results / "runs" / "paper_controlled" / "controlled_drift" / "keep_first"
        meta = json.loads((method / "max_episodes=20" / f"seed={seed}" / "meta.json").read_text())
        assert meta["complete"] is True and meta["config"]["memory"]["_target_"].endswith("KeepFirst")
        assert meta["identity"]["memory"] == {"option": "keep_first", "top_k": 8}  # display is not identity

    out = tmp_path / "report"
    analysed = _python(
        project, "-m", "analysis", "--runs", str(results / "runs"), "--out", str(out), "--quiet"
    )
    assert analysed.returncode == 0, analysed.stderr
    table = (out / "tables" / "success_paper_controlled.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("|")]
    names = [line.split("|")[2].strip() for line in rows]  # | Setting | Method | ... |
    assert "Keep-First" in names and names.index("No Memory") < names.index("Keep-First")  # by rank
