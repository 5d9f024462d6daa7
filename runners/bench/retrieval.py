"""The cost of similarity retrieval: the paper's preference experiment (every paper method, one seed, on
the simulated backend) under each retrieval mode, as a ratio to keyed retrieval.

Each mode's total is the sum over methods of one stream's wall time through the agent loop, median of
`repeats` rounds in rotated order; the dense mode's embeddings are warmed first (a run's cache holds its
texts after its first stream, so the steady state is what a sweep pays).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from runners.bench.agent import PAPER_MEMORIES, _run
from runners.compose import compose_spec

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
