"""`make reproduce` at a reference commit and at this tree, back to back: figures that compare across days.

The same commit's `make reproduce` takes from about 220 to 360 CPU seconds on the same kind of shared
2-core machine, from one day to the next and sometimes within the hour, so an absolute figure says as
much about the machine as about the code. Timed in pairs (the reference, then this tree, then this tree
and the reference, ...), the ratio of the two is what the code changed. Scaled by the figures the
reference had where the targets were set (TARGET_REFERENCE), it gives this tree's figures on that
machine: the ones the targets are met against.

Both trees run their own `make reproduce` commands (`python -m runners.launch.reproduce --results-dir
DIR`, then `python -m analysis --runs DIR/runs --out DIR --quiet`) with this interpreter, in their own
folder (the reference's is `git archive`d from this repository), into a temporary results folder.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runners.bench.clock import children_cpu

#: The commit the targets of `make reproduce` were set against, and its figures then (wall and CPU
#: seconds, the analysis' wall seconds; a quiet 2-core machine, 2026-12-03): the targets (100 s wall,
#: 200 CPU s, 5 s of analysis) ask for about half of each.
TARGET_REFERENCE: dict[str, Any] = {
    "commit": "c21320c7b850130a02808a3fb9bc68e32c8d8f00",
    "wall_s": 194.5,
    "cpu_s": 378.7,
    "analysis_s": 9.4,
}
#: The paired figures: a pair's ratio is this tree's figure over the reference's.
FIGURES = ("wall_s", "cpu_s", "analysis_s")


def resolve(commit: str, root: Path) -> str:
    """The full hash of `commit` in the repository at `root`; ValueError (one line) when it is none."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise ValueError(f"--reference {commit}: not a commit of the repository at {root}")
    return done.stdout.strip()


def extract(commit: str, root: Path, into: Path) -> Path:
    """The tree of `commit` (a full hash) written into the new folder `into`, as `git archive` gives it."""
    into.mkdir()
    with subprocess.Popen(
        ["git", "-C", str(root), "archive", "--format=tar", commit], stdout=subprocess.PIPE
    ) as git:
        assert git.stdout is not None
        with tarfile.open(fileobj=git.stdout, mode="r|") as tar:
            tar.extractall(into, filter="data")
    if git.returncode:
        raise RuntimeError(f"git archive {commit} exited with {git.returncode}")
    return into


def time_tree(tree: Path) -> dict[str, Any]:
    """Wall and CPU seconds of `tree`'s `make reproduce` commands into a temporary results folder, and
    the analysis' wall seconds; on a failure, the failed command's last lines under `failed`."""
    with tempfile.TemporaryDirectory(prefix="tepa-bench-pair-") as tmp:
        out = f"{tmp}/results"
        commands = (
            [sys.executable, "-m", "runners.launch.reproduce", "--results-dir", out],
            [sys.executable, "-m", "analysis", "--runs", f"{out}/runs", "--out", out, "--quiet"],
        )
        start, cpu = time.perf_counter(), children_cpu()
        marks = []
        for command in commands:
            done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
            marks.append(time.perf_counter())
            if done.returncode:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return {"failed": f"{' '.join(command[1:3])}: exit {done.returncode}: {' / '.join(tail)}"}
        cpu = children_cpu() - cpu
    return {
        "wall_s": round(marks[-1] - start, 1),
        "cpu_s": round(cpu, 1),
        "analysis_s": round(marks[-1] - marks[0], 1),
    }


def paired(
    commit: str, root: Path, pairs: int = 1, timer: Callable[[Path], dict[str, Any]] = time_tree
) -> dict[str, Any]:
    """`pairs` pairs of timings of the reference `commit` and of the tree at `root`, in ABBA order (the
    reference first in odd pairs, this tree first in even ones), with the median of the pairs' ratios
    and, when `commit` is TARGET_REFERENCE's, this tree's figures scaled to the reference's there."""
    full = resolve(commit, root)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tepa-bench-reference-") as tmp:
        tree = extract(full, root, Path(tmp) / "tree")
        for i in range(pairs):
            order = ("reference", "this") if i % 2 == 0 else ("this", "reference")
            pair = {side: timer(tree if side == "reference" else root) for side in order}
            runs.append({"reference": pair["reference"], "this": pair["this"]})
            if any("failed" in side for side in pair.values()):
                return {"commit": full, "pairs": runs, "failed": _failure(pair)}
    ratios = {
        figure: round(statistics.median(run["this"][figure] / run["reference"][figure] for run in runs), 3)
        for figure in FIGURES
    }
    report: dict[str, Any] = {"commit": full, "pairs": runs, "ratios": ratios}
    if full == TARGET_REFERENCE["commit"]:
        report["scaled"] = {f: round(ratios[f] * TARGET_REFERENCE[f], 1) for f in FIGURES}
    return report


def _failure(pair: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{side}: {run['failed']}" for side, run in pair.items() if "failed" in run)
