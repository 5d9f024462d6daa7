"""The cost of logging what each prompt held: `make reproduce`'s drift experiments on a few seeds, run
as the Makefile runs them (side by side, then the analysis), once with `log_samples=true` (the default)
and once with `log_samples=false`, as a ratio.

The two modes alternate within each of `repeats` rounds (in rotated order) and the medians are
compared, so that a noisy machine slows both alike; each round writes into a fresh temporary folder, so
no stream is ever skipped as already complete.
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runners.launch import reproduce
from runners.run import PROJECT_ROOT

#: The experiments timed: the drift settings, where Append-Only's prompts (and so its logged evidence)
#: grow longest, and executable drift, whose episodes cost the most.
EXPERIMENTS = ("paper_executable", "paper_controlled")
SEEDS = (0, 1, 2)


def sample_cost(
    repeats: int,
    tree_bytes: Callable[[Path], int],
    seeds: Sequence[int] = SEEDS,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Median wall seconds with and without logged samples, their ratio, and the run trees' sizes
    (`tree_bytes` measures a folder; `overrides`: Hydra overrides for every job, e.g. shorter streams)."""
    seconds: dict[bool, list[float]] = {True: [], False: []}
    size: dict[bool, int] = {}
    for r in range(repeats):
        for logged in (True, False) if r % 2 == 0 else (False, True):
            with tempfile.TemporaryDirectory(prefix="tepa-bench-samples-") as tmp:
                seconds[logged].append(_time_once(tmp, logged, seeds, overrides))
                size[logged] = tree_bytes(Path(tmp) / "runs")
    median = {logged: statistics.median(s) for logged, s in seconds.items()}
    return {
        "experiments": list(EXPERIMENTS),
        "seeds": list(seeds),
        "seconds_logged": round(median[True], 2),
        "seconds_unlogged": round(median[False], 2),
        "ratio": round(median[True] / median[False], 3),
        "tree_ratio": round(size[True] / size[False], 3) if size[False] else None,
    }


def _time_once(results_dir: str, logged: bool, seeds: Sequence[int], overrides: Sequence[str]) -> float:
    """Wall seconds of the experiments side by side and then the analysis, into `results_dir`."""
    extra = [f"seeds=[{','.join(map(str, seeds))}]", f"log_samples={str(logged).lower()}", *overrides]
    todo = [
        dataclasses.replace(step, command=[*step.command, *extra])
        for step in reproduce.steps(results_dir)
        if step.name in EXPERIMENTS
    ]
    start = time.perf_counter()
    ran = reproduce.run_side_by_side(todo, echo=False, cwd=PROJECT_ROOT)
    if "failed" in ran:
        raise RuntimeError(f"log_samples={logged}: {ran['failed']}")
    analysis = [sys.executable, "-m", "analysis", "--runs", f"{results_dir}/runs", "--out", results_dir]
    done = subprocess.run([*analysis, "--quiet"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"log_samples={logged}: analysis exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - start
