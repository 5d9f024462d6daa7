"""The map's report (analysis.report.map) on synthetic run summaries whose answers are known: the paired,
Holm-corrected verdicts against the best simple baseline, winners, the frontier, budgets, the summary."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.map.runs import RULES, choose, point_params
from analysis.report.map import analyse_map, summary, tables

SEEDS = list(range(10))
SPEC = {
    "name": "robustness_map",
    "experiment": "robustness_map",
    "env": {"phase_length": 100},
    "axes": {"env.noise": [0.0, 0.3], "env.reversal_rate": [0.0]},
    "methods": ["lww", "reactive", "tepa_rev", "oracle_reset"],
    "eval_seeds": SEEDS,
    "tuning_seeds": [1000],
    "tune": {"reactive": {"c": [1, 2]}},
    "memory_defaults": {
        "lww": {"top_k": 8},
        "reactive": {"c": 2, "top_k": 8},
        "tepa_rev": {"top_k": 8},
        "oracle_reset": {"top_k": 8},
    },  # fmt: skip
}
# cell 0: TEPA-Rev 0.9 beats Reactive 0.8 on every seed; cell 1: tuned Reactive (c=1) 0.7 beats TEPA-Rev 0.6
SUCCESS = {
    (0, "lww", None): 0.5, (0, "reactive", 1): 0.8, (0, "reactive", 2): 0.75, (0, "tepa_rev", None): 0.9,
    (0, "oracle_reset", None): 0.99,
    (1, "lww", None): 0.4, (1, "reactive", 1): 0.7, (1, "reactive", 2): 0.5, (1, "tepa_rev", None): 0.6,
    (1, "oracle_reset", None): 0.99,
}  # fmt: skip
TOKENS = {"lww": 120.0, "reactive": 700.0, "tepa_rev": 130.0, "oracle_reset": 600.0}


def runs() -> pd.DataFrame:
    rows = []
    for (cell, method, c), success in SUCCESS.items():
        params = point_params(SPEC, method, {} if c is None else {"c": c})
        seeds = [*SEEDS, 1000]
        for seed in seeds:
            jitter = 0.001 * (seed % 3)
            rows.append(
                {
                    "method": method,
                    "cell": cell,
                    "seed": seed,
                    "params": params,
                    "success": success + jitter,
                    "tokens": TOKENS[method],
                    "revocations": 3,
                    "success.full_reversal": success,
                    **{f"{kind}.{rule}": 1 for kind in ("revoked", "revoked_good") for rule in RULES},
                }  # fmt: skip
            )
    return pd.DataFrame(rows)


def test_tepa_wins_where_it_is_better_on_every_seed_and_loses_where_a_tuned_rule_is():
    result = analyse_map(runs(), SPEC)
    adv = result.advantage[result.advantage["setting"] == "tuned"].set_index("cell")
    assert list(adv["best"]) == ["reactive", "reactive"]  # Oracle Reset is never the baseline
    assert np.allclose(adv["diff"], [0.1, -0.1])
    assert list(adv["verdict"]) == ["wins", "loses"]
    assert np.allclose(adv["p"], 2 / 2**10) and np.allclose(adv["p_holm"], 2 * 2 / 2**10)
    # at its defaults (c=2) Reactive scores 0.5 in cell 1: TEPA-Rev wins there
    defaults = result.advantage[result.advantage["setting"] == "defaults"].set_index("cell")
    assert np.allclose(defaults["diff"], [0.15, 0.1])


def test_capped_runs_form_the_budget_map_and_never_the_tuned_one():
    frame = runs()
    capped = frame[frame["method"] == "tepa_rev"].assign(max_evidence=2, success=0.0)
    both = pd.concat([frame.assign(max_evidence=None), capped], ignore_index=True)
    result = analyse_map(both, {**SPEC, "evidence_budget": 2})
    s = result.success.set_index(["setting", "cell", "method"])["success"]
    assert s[("tuned", 0, "tepa_rev")] > 0.89 and s[("budget", 0, "tepa_rev")] == 0.0
    budget = result.advantage[result.advantage["setting"] == "budget"]
    assert list(budget["verdict"]) == []  # no simple baseline ran under the budget: nothing to compare
    assert analyse_map(both, SPEC).success["setting"].isin(["tuned", "defaults"]).all()  # no budget declared


def test_winners_frontier_and_budget():
    result = analyse_map(runs(), SPEC)
    tuned = result.winners[result.winners["setting"] == "tuned"]
    assert list(tuned["winner"]) == ["tepa_rev", "reactive"]  # the oracle does not win cells
    frontier = result.frontier.set_index(["cell", "method"])["dominated_by"]
    assert frontier[(0, "reactive")] == "tepa_rev" and frontier[(0, "tepa_rev")] == ""
    assert frontier[(1, "reactive")] == "" and frontier[(1, "lww")] == ""
    budget = result.budget.set_index(["budget", "cell"])["winner"]
    assert budget[(110.0, 1)] == ""  # no method fits 110 tokens
    assert budget[(130.0, 1)] == "tepa_rev" and budget[(math.inf, 1)] == "reactive"


def test_the_summary_states_the_counts_and_tables_cover_every_cell():
    result = analyse_map(runs(), SPEC)
    text = "\n".join(summary(result))
    assert (
        "TEPA-Rev (tuned) against the best simple baseline (tuned)**, 2 cells, 10 evaluation seeds, the "
        "baseline picked on the tuning seeds: " in text
    )
    assert "wins in 1, matches in 0, loses in 1" in text
    assert "Loses: noise=0.3, reversal_rate=0; the rule that beats it there: Reactive (1)." in text
    names = {t.name: t for t in tables(result)}
    assert {"map_success", "map_advantage", "map_winners", "map_frontier", "map_budget"} <= set(names)
    assert len(names["map_advantage"].rows) == 4  # 2 cells x (tuned, defaults)


def test_the_results_readme_carries_the_maps_findings_once_the_map_has_run(tmp_path):
    from analysis.report.readme import _companions

    assert not any("robustness map" in part for part in _companions(tmp_path))
    (tmp_path / "map").mkdir()
    (tmp_path / "map" / "summary.md").write_text("- **TEPA-Rev (tuned)** wins in 3\n", encoding="utf-8")
    parts = _companions(tmp_path)
    assert any(part.startswith("## Beyond the paper: when revocation pays") for part in parts)
    assert "- **TEPA-Rev (tuned)** wins in 3\n" in parts and any("map/README.md" in part for part in parts)


def test_the_best_baseline_and_every_tuned_point_are_picked_on_the_tuning_seeds_only():
    frame = runs()
    tuning = frame["seed"] == 1000
    # on the tuning seed LWW is the better simple baseline in cell 1 (0.75 against Reactive's 0.7 at c=1)
    lww = (frame["method"] == "lww") & (frame["cell"] == 1)
    frame.loc[lww & tuning, "success"] = 0.75
    result = analyse_map(frame, SPEC)
    adv = result.advantage[result.advantage["setting"] == "tuned"].set_index("cell")
    # on the evaluation seeds Reactive (0.7) beats LWW (0.4): picking there would compare with Reactive
    assert adv.loc[1, "best"] == "lww" and adv.loc[1, "best_tuning"] == 0.75
    assert np.isclose(adv.loc[1, "diff"], 0.6 - 0.4)  # scored on the evaluation seeds
    picked = result.advantage[["setting", "target", "cell", "best", "best_tuning"]]
    chosen = choose(frame, SPEC)
    # other numbers in every evaluation log: the picks do not move; the differences do
    rng = np.random.default_rng(0)
    swapped = frame.copy()
    evaluation = ~swapped["seed"].isin(SPEC["tuning_seeds"])
    swapped.loc[evaluation, "success"] = rng.uniform(0, 1, evaluation.sum())
    other = analyse_map(swapped, SPEC)
    pd.testing.assert_frame_equal(other.advantage[picked.columns], picked)
    assert choose(swapped, SPEC) == chosen
    assert not np.allclose(other.advantage["diff"], result.advantage["diff"])
    # other numbers on the tuning seed do move them: the picks are read from there
    flipped = frame.copy()
    flipped.loc[lww & tuning, "success"] = 0.1
    c2 = (flipped["method"] == "reactive") & (flipped["params"] == point_params(SPEC, "reactive", {"c": 2}))
    flipped.loc[c2 & tuning, "success"] = 0.95
    again = analyse_map(flipped, SPEC)
    assert choose(flipped, SPEC) == {(0, "reactive"): {"c": 2}, (1, "reactive"): {"c": 2}}
    assert list(again.advantage.set_index(["setting", "cell"]).loc["tuned", "best"]) == [
        "reactive",
        "reactive",
    ]


def test_a_simple_baseline_without_tuning_seed_runs_stops_the_analysis():
    frame = runs()
    frame = frame[~((frame["method"] == "lww") & (frame["seed"] == 1000))]
    with pytest.raises(ValueError, match=r"^runs: cell 0, lww \(tuned\): no run on every tuning seed"):
        analyse_map(frame, SPEC)


def test_the_overall_gap_averages_the_cells_per_seed():
    result = analyse_map(runs(), SPEC)
    overall = result.overall.set_index(["target", "setting"])
    row = overall.loc[("tepa_rev", "tuned")]
    assert (row["cells"], row["wins"], row["matches"], row["loses"]) == (2, 1, 0, 1)
    assert np.isclose(row["diff"], 0.0) and row["low"] <= 0.0 <= row["high"] and row["n"] == 10
    assert np.isclose(overall.loc[("tepa_rev", "defaults"), "diff"], (0.15 + 0.1) / 2)


def test_runs_under_the_evidence_budget_never_choose_a_tuned_point():
    frame = runs().assign(max_evidence=None)
    c2 = point_params(SPEC, "reactive", {"c": 2})
    capped = frame[(frame["params"] == c2) & (frame["seed"] == 1000)].assign(max_evidence=2, success=1.0)
    both = pd.concat([frame, capped], ignore_index=True)
    assert choose(both, SPEC) == choose(frame, SPEC) == {(0, "reactive"): {"c": 1}, (1, "reactive"): {"c": 1}}
