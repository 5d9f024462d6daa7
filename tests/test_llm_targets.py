"""runners.llm.targets on success per seed built by hand: the paired difference and what its note says
about the sign-flip p, which is exact only up to analysis.stats.EXACT_MAX_PAIRS seeds."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.stats import EXACT_MAX_PAIRS
from runners.llm import targets


def success(seeds: int) -> pd.Series:
    """Append-Only 0.1 above No Memory after the reversal on even seeds, level on odd ones."""
    rows = [
        (memory, "full_reversal", seed, 0.4 + (0.1 if memory == "append_only" and seed % 2 == 0 else 0.0))
        for memory in ("no_memory", "append_only")
        for seed in range(seeds)
    ]
    frame = pd.DataFrame(rows, columns=["memory", "phase", "seed", "success"])
    return frame.set_index(["memory", "phase", "seed"])["success"].sort_index()


@pytest.mark.parametrize("seeds", [EXACT_MAX_PAIRS, 28])
def test_the_central_difference_is_paired_by_seed_and_its_note_says_how_p_was_found(seeds):
    table = targets.targets(success(seeds))
    (row,) = table.to_dict("records")
    assert row["difference"] == "append_only - no_memory" and row["seeds"] == seeds
    assert row["mean"] == pytest.approx(0.05) and row["low"] > 0 and 0 < row["p_sign_flip"] < 0.01
    text = targets.to_markdown(table)
    assert "| <0.001 | " in text  # a p below 0.001 is never printed as 0.000
    assert f"exact up to {EXACT_MAX_PAIRS} seeds (above, from 9,999 random sign patterns)" in text
    assert "lww - no_memory, tepa_rev - no_memory, tepa_rev - append_only" in text  # not run
