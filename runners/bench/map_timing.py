"""The wall time of `make map` (the robustness map, the noise hypothesis, then the analysis) into a temporary
results_dir, as `python -m runners.bench` reports it (target: at most MAP_BUDGET_S on 2 cores)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from typing import Any

from runners.bench.clock import children_cpu
from runners.compose import PROJECT_ROOT

MAP_BUDGET_S = 900  # 15 minutes


def map_commands(results_dir: str) -> list[list[str]]:
    """The Makefile's `map` recipe with this interpreter and another results_dir."""
    hypothesis = f"{results_dir}/noise_hypothesis"
    return [
        [sys.executable, "-m", "runners.map", f"results_dir={results_dir}", "progress=false"],
        [
            sys.executable,
            "-m",
            "runners.map",
            "--map",
            "noise_hypothesis",
            f"results_dir={hypothesis}",
            "progress=false",
        ],  # fmt: skip
        [sys.executable, "-m", "analysis.map", "--out", results_dir, "--hypothesis", hypothesis],
    ]


def time_map() -> dict[str, Any]:
    """Wall and CPU seconds of every step of `make map`; a failed step is reported, not raised."""
    steps: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tepa-bench-map-") as tmp:
        start = time.perf_counter()
        cpu_start = children_cpu()
        for name, command in zip(("map", "noise hypothesis", "analysis"), map_commands(tmp), strict=True):
            step = time.perf_counter()
            done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
            steps[name] = round(time.perf_counter() - step, 1)
            if done.returncode:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return {"steps_s": steps, "failed": f"{name}: exit {done.returncode}: {' / '.join(tail)}"}
        return {
            "steps_s": steps,
            "wall_s": round(time.perf_counter() - start, 1),
            "cpu_s": round(children_cpu() - cpu_start, 1),
        }
