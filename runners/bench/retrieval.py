"""The cost of similarity retrieval on the paper's preference experiment (simulated backend), as ratios
to keyed retrieval, measured two ways:

- the stream loop alone: every paper method, one seed, through the agent loop in this process under
  each mode; a mode's total is the sum over methods of one stream's wall time, median of `repeats`
  rounds in rotated order, the dense mode's embeddings warmed first (a run's cache holds its texts after
  its first stream, so the steady state is what a sweep pays). The strict figure: nothing but the
  episodes is timed.
- the run (`run_cost`): `python -m runners.run -m experiment=paper_preference` as `make reproduce` runs
  it (every method, 10 seeds, side by side), keyed and `retrieval=dense`, each into a fresh results
  folder, so that dense starts with an empty embedding cache and embeds every text it meets: a user's
  first run. What the dense budget is set on (a run's wall time); the median of the rounds' paired
  ratios, wall and CPU.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from runners.bench.agent import PAPER_MEMORIES, _run
from runners.bench.clock import children_cpu, paired_ratio
from runners.compose import PROJECT_ROOT, compose_spec
from runners.launch import reproduce

MODES = ("keyed", "bm25", "dense")


def retrieval_cost(
    repeats: int, memories: Sequence[str] = PAPER_MEMORIES, seed: int = 0, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """Seconds per mode (summed over `memories`) and each mode's ratio to keyed (`overrides`: Hydra
    overrides of the environment, e.g. a shorter stream)."""
    specs = {
        mode: [
            compose_spec(["env=preference_stream", f"memory={m}", f"retrieval={mode}", *overrides])
            for m in memories
        ]
        for mode in MODES
    }
    _run(specs["dense"][0], seed)  # loads the model and embeds the stream's texts once
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(repeats):
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            start = time.perf_counter()
            for spec in specs[mode]:
                _run(spec, seed)
            seconds[mode].append(time.perf_counter() - start)
    median = {mode: statistics.median(s) for mode, s in seconds.items()}
    return {
        "memories": list(memories),
        "seconds": median,
        "ratio_to_keyed": {mode: median[mode] / median["keyed"] for mode in MODES},
    }


#: The experiment the run-level figure times, as `make reproduce` runs it.
RUN_EXPERIMENT = "paper_preference"


def run_cost(repeats: int, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """`RUN_EXPERIMENT`'s wall and CPU seconds (medians) keyed and with `retrieval=dense`, each round into
    fresh folders, and the medians of the rounds' paired ratios (`overrides`: Hydra overrides for the
    run, e.g. fewer seeds)."""
    wall: dict[str, list[float]] = {"keyed": [], "dense": []}
    cpu: dict[str, list[float]] = {"keyed": [], "dense": []}
    for r in range(repeats):
        for mode in ("keyed", "dense") if r % 2 == 0 else ("dense", "keyed"):
            with tempfile.TemporaryDirectory(prefix="tepa-bench-retrieval-") as tmp:
                (step,) = (s for s in reproduce.steps(tmp) if s.name == RUN_EXPERIMENT)
                start, cpu_start = time.perf_counter(), children_cpu()
                done = subprocess.run(
                    [*step.command, f"retrieval={mode}", *overrides],
                    cwd=PROJECT_ROOT,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
                    raise RuntimeError(f"{RUN_EXPERIMENT} retrieval={mode}: exit {done.returncode}: {tail}")
                wall[mode].append(time.perf_counter() - start)
                cpu[mode].append(children_cpu() - cpu_start)

    return {
        "experiment": RUN_EXPERIMENT,
        "rounds": repeats,
        "seconds": {mode: round(statistics.median(s), 2) for mode, s in wall.items()},
        "cpu_seconds": {mode: round(statistics.median(s), 2) for mode, s in cpu.items()},
        "dense_ratio": paired_ratio(wall["dense"], wall["keyed"]),
        "dense_cpu_ratio": paired_ratio(cpu["dense"], cpu["keyed"]),
    }
