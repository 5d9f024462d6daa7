"""The scoring pilot's criterion (runners.llm.pilot.choose) and the real-model targets
(runners.llm.targets) on hand-made numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from runners.llm.pilot import choose
from runners.llm.targets import targets, to_markdown


def pilot(*rows: tuple[str, float, float, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"scoring": s, "no_memory_first": f, "chance": 1 / 3, "gain": g, "requests_per_decision": r}
         for s, f, g, r in rows]
    )  # fmt: skip


def test_the_gate_comes_first_then_the_gain_then_the_cheaper_mode():
    # loglik has the largest gain but fails the gate (first option 0.75)
    assert choose(pilot(("loglik", 0.75, 0.5, 3), ("calibrated", 0.31, 0.4, 6), ("cloze", 0.40, 0.1, 3))) == (
        "calibrated"
    )
    # within TIE of the best gain: the mode with fewer requests per decision
    assert choose(pilot(("calibrated", 0.31, 0.40, 6), ("cloze", 0.40, 0.39, 3))) == "cloze"
    # nobody through the gate: the mode closest to chance
    assert choose(pilot(("loglik", 0.80, 0.5, 3), ("permuted", 0.50, 0.0, 9))) == "permuted"


def success(values: dict[tuple[str, str], list[float]]) -> pd.Series:
    rows = [(m, p, seed, v) for (m, p), vs in values.items() for seed, v in enumerate(vs)]
    frame = pd.DataFrame(rows, columns=["memory", "phase", "seed", "success"])
    return frame.set_index(["memory", "phase", "seed"])["success"].sort_index()


def test_each_target_is_met_or_not_from_the_paired_differences():
    seeds = 8
    values = {
        ("no_memory", "stable"): [0.3] * seeds,
        ("lww", "stable"): [0.7, 0.6, 0.65, 0.7, 0.6, 0.62, 0.68, 0.66],
        ("tepa_rev", "stable"): [0.35, 0.25, 0.3, 0.4, 0.3, 0.2, 0.35, 0.3],
        ("no_memory", "full_reversal"): [0.3] * seeds,
        ("append_only", "full_reversal"): [0.32, 0.28, 0.3, 0.35, 0.29, 0.3, 0.27, 0.31],
        ("tepa_rev", "full_reversal"): [0.5] * seeds,
    }
    table = targets(success(values)).set_index("difference")
    assert table.loc["lww - no_memory", "met"] and table.loc["lww - no_memory", "low"] > 0
    assert not table.loc["tepa_rev - no_memory", "met"]
    assert not table.loc["append_only - no_memory", "met"]  # not below No Memory
    assert table.loc["tepa_rev - append_only", "met"]
    assert (table["seeds"] == seeds).all()


def test_a_target_whose_methods_did_not_run_is_left_out_and_named():
    values = {("no_memory", "full_reversal"): [0.3, 0.4], ("append_only", "full_reversal"): [0.2, 0.3]}
    table = targets(success(values))
    assert list(table["difference"]) == ["append_only - no_memory"] and table["seeds"].tolist() == [2]
    assert "Not run (no complete seed in common): lww - no_memory, tepa_rev - no_memory, tepa_rev - " in (
        to_markdown(table)
    )
    with pytest.raises(ValueError, match="no pair of methods"):
        targets(success({("lww", "stable"): [0.5]}))
