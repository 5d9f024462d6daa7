"""The scorecard's rows beyond the paper: read from the tables the robustness map's analysis writes
(`python -m analysis.map`), "not run" without them, and shown in the scorecard table with their evidence."""

import pandas as pd

from analysis.reference.scorecard import BEYOND, NOT_RUN, beyond_the_paper
from analysis.report.map import analyse_map, tables
from analysis.report.tables import scorecard_table, write_tables
from tests.test_map_report import SPEC, runs
from tests.test_scorecard import SUCCESS, analysis_of


def map_results(root, frame=None):
    """The map's tables as `python -m analysis.map` writes them, under root/map/tables."""
    write_tables(tables(analyse_map(runs() if frame is None else frame, SPEC)), root / "map" / "tables")
    return root


def test_without_a_map_run_every_row_beyond_the_paper_is_not_run(tmp_path):
    card = beyond_the_paper(tmp_path)
    assert len(card) == 5 and set(card["verdict"]) == {NOT_RUN}
    assert set(card["reason"]) == {"no map run"}


def test_the_rows_carry_the_maps_counts_gap_and_tight_budget_winners(tmp_path):
    card = beyond_the_paper(map_results(tmp_path)).set_index(["method", "phase"])
    rev = card.loc[("tepa_rev", "tuned")]
    assert rev["verdict"] == BEYOND and (rev["cells"], rev["wins"], rev["loses"]) == (2, 1, 1)
    assert rev["summary"].startswith("wins 1, matches 0, loses 1 of 2 cells; mean gap +0.000 [")
    assert abs(rev["ours"]) < 1e-9 and rev["low"] <= 0 <= rev["high"]
    assert rev["evidence"] == "map/figures/map_tepa_rev_advantage.png"
    # TEPA-Full is not in this map, and it declares no evidence budget: those rows did not run
    assert card.loc[("tepa_full", "tuned"), "verdict"] == NOT_RUN
    assert card.loc[("tepa_rev", "budget"), "verdict"] == NOT_RUN
    tight = card.loc[("", "tight prompt budget")]
    # nothing fits 110 tokens; at 130 TEPA-Rev (130 tokens) beats LWW (120) in both cells
    assert (
        tight["ours"] == 130
        and tight["summary"] == "<= 130 prompt tokens per decision: TEPA-Rev 2 of 2 cells"
    )
    assert tight["evidence"] == "map/tables/map_budget.md"


def test_the_rows_follow_the_maps_numbers(tmp_path):
    frame = runs()
    better = (frame["method"] == "tepa_rev") & ~frame["seed"].isin(SPEC["tuning_seeds"])
    frame.loc[better, "success"] += 0.2  # TEPA-Rev now beats the tuned Reactive in both cells
    rev = (
        beyond_the_paper(map_results(tmp_path, frame))
        .set_index(["method", "phase"])
        .loc[("tepa_rev", "tuned")]
    )
    assert (rev["wins"], rev["loses"]) == (2, 0)
    assert rev["summary"].startswith("wins 2, matches 0, loses 0 of 2 cells; mean gap +0.200 [")


def test_the_scorecard_table_shows_them_after_the_papers_rows_with_their_evidence(tmp_path):
    paper_only = scorecard_table(analysis_of(SUCCESS))
    table = scorecard_table(analysis_of(SUCCESS), map_results(tmp_path))
    assert table.rows[: len(paper_only.rows)] == paper_only.rows
    extra = table.rows[len(paper_only.rows) :]
    assert len(extra) == 5 and len(table.data) == len(paper_only.data) + 5
    first = extra[0]
    assert first[:4] == ["robustness map", "tuned", "TEPA-Rev (tuned) - best simple baseline (tuned)", BEYOND]
    assert first[4].startswith("wins 1, matches 0, loses 1 of 2 cells") and first[5] == "not in the paper"
    assert first[-1] == "[evidence](map/figures/map_tepa_rev_advantage.png)"
    assert "beyond the paper, which has no such number" in table.note
    assert f"1 {BEYOND}" not in table.note and f"2 {BEYOND}" in table.note  # tuned gap and tight budget
    assert isinstance(table.data, pd.DataFrame) and set(table.data["verdict"]) >= {BEYOND, NOT_RUN}
