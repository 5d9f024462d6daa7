"""results/README.md and the experiment pages: a summary computed from the tables, verdicts that say how
far off, headings that name configurations as people do, kept results marked, links that resolve."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.report import manifest
from analysis.report.pages import page_name
from analysis.report.tables import verdict_text
from tests.helpers.report_pages import anchor, headings, links, pages
from tests.test_analysis_outputs import LEVEL, ROOT, reseal, write_run

SEEDS = range(8)


def paper_runs(root: Path, methods=("no_memory", "append_only", "reactive", "tepa_rev")) -> Path:
    for memory in methods:
        for seed in SEEDS:
            write_run(root, "paper_controlled", "controlled_drift", memory, seed)
    return root


def analysed(runs: Path, out: Path) -> Path:
    assert main(["--runs", str(runs), "--out", str(out), "--quiet"]) == 0
    return out


def summary(out: Path) -> list[str]:
    text = (out / "README.md").read_text(encoding="utf-8")
    block = text.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in block.splitlines() if line.startswith("- ")]


def test_the_readme_opens_with_a_summary_that_follows_the_numbers_of_the_tables(tmp_path, monkeypatch):
    out = analysed(paper_runs(tmp_path / "a"), tmp_path / "out_a")
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert readme.splitlines()[:3] == ["# Results", "", "## Summary"]
    lines = summary(out)
    assert 2 <= len(lines) <= 10
    success = pd.read_csv(out / "tables" / "success_paper_controlled.csv")
    overall = success[success["phase"] == "overall"].set_index("memory")["mean"]
    rule = next(line for line in lines if "simple forgetting rule" in line)
    assert "TEPA-Rev beats the best simple forgetting rule in all 1 of the paper's drift streams" in rule
    assert f"Reactive {overall['reactive']:.3f} against {overall['tepa_rev']:.3f}" in rule
    # The same runs with Reactive far better: the summary's template turns with the numbers.
    monkeypatch.setitem(LEVEL, "reactive", 0.95)
    out = analysed(paper_runs(tmp_path / "b"), tmp_path / "out_b")
    success = pd.read_csv(out / "tables" / "success_paper_controlled.csv")
    overall = success[success["phase"] == "overall"].set_index("memory")["mean"]
    rule = next(line for line in summary(out) if "simple forgetting rule" in line)
    assert "a simple forgetting rule matches or beats TEPA-Rev in all 1 of the paper's drift streams" in rule
    assert f"Reactive {overall['reactive']:.3f} against {overall['tepa_rev']:.3f}" in rule


def test_the_summary_names_the_largest_gap_with_the_scorecards_numbers(tmp_path):
    out = analysed(paper_runs(tmp_path / "runs"), tmp_path / "out")
    card = pd.read_csv(out / "tables" / "scorecard.csv")
    short = card[card["verdict"].isin(["direction only", "not reproduced"]) & card["gap"].notna()]
    largest = short.loc[short["gap"].abs().idxmax()]
    line = next(line for line in summary(out) if line.startswith("- **What reproduces:**"))
    assert f"{largest['ours']:.3f} against the paper's {largest['paper']:.3f} ({largest['gap']:+.2f})" in line
    counts = card["verdict"].value_counts()
    assert f"{counts.get('reproduced', 0)} reproduce" in line


def test_a_verdict_that_falls_short_says_how_far_off_it_is():
    record = {"metric": "success", "ours": 0.711, "paper": 0.138, "verdict": "direction only"}
    assert verdict_text(record) == "direction only (+0.57 off)"
    assert verdict_text(record | {"ours": 0.977, "paper": 0.63, "verdict": "not reproduced"}) == (
        "not reproduced (+0.35 off)"
    )
    assert verdict_text(record | {"verdict": "reproduced"}) == "reproduced"
    assert verdict_text(record | {"metric": "p", "verdict": "not reproduced"}) == "not reproduced"


def test_the_scorecard_on_the_page_shows_each_gap_and_the_runs_of_each_row(tmp_path):
    out = analysed(paper_runs(tmp_path / "runs"), tmp_path / "out")
    card = pd.read_csv(out / "tables" / "scorecard.csv")
    readme = (out / "README.md").read_text(encoding="utf-8")
    scorecard = readme.split("## Reproduction scorecard\n", 1)[1].split("\n## ", 1)[0]
    assert "| From (runs) |" in scorecard
    short = card[card["verdict"].isin(["direction only", "not reproduced"]) & card["gap"].notna()]
    assert len(short)
    for row in short.to_dict("records"):
        assert f"| {row['verdict']} ({row['gap']:+.2f} off) |" in scorecard
    assert f"| {len(list(SEEDS)) * 4} runs (commit and date not recorded) |" in scorecard


def test_no_heading_names_a_configuration_by_its_hash_or_by_the_union_of_its_arms_keys(tmp_path):
    root = tmp_path / "runs"
    arms = {
        "tepa_rev": "",
        "tepa_rev-counts=lifetime": "memory.counts=lifetime",
        "tepa_rev_literal": "cfg-b4cf937ac291",
    }
    for memory, variant in arms.items():
        for seed in SEEDS:
            run = write_run(root, "ablation_lifecycle", "controlled_drift", memory, seed)
            meta = json.loads((run / "meta.json").read_text())
            (run / "meta.json").write_text(json.dumps(meta | {"variant": variant}))
    out = analysed(root, tmp_path / "out")
    written = pages(out)
    assert "ablation_lifecycle.md" in written
    titles = [h for text in written.values() for h in headings(text)]
    assert any(h == "ablation_lifecycle: success per phase" for h in titles)
    assert not [h for h in titles if "cfg-" in h or "memory.counts" in h or ";" in h]
    runs = (out / "README.md").read_text(encoding="utf-8").split("## Runs\n", 1)[1].split("\n## ", 1)[0]
    assert "| ablation_lifecycle |" in runs and "cfg-" not in runs
    # each arm keeps its own name in the rows
    assert "| controlled_drift | tepa_rev-counts=lifetime |" in written["ablation_lifecycle.md"]


def test_results_kept_from_an_earlier_manifest_are_marked_kept_on_their_page_and_in_the_readme(tmp_path):
    out = analysed(paper_runs(tmp_path / "paper"), tmp_path / "out")
    for seed in SEEDS:
        write_run(tmp_path / "own", "own", "controlled_drift", "no_memory", seed)
    analysed(tmp_path / "own", out)
    entry = json.loads((out / "manifest.json").read_text())["experiments"]["paper_controlled"]
    record = entry["provenance"]
    kept = f"kept from the manifest of {(record['analysis_commit'] or 'an unknown commit')[:7]}"
    kept += f", {record['analysed_on']}"
    written = pages(out)
    assert kept in written["paper_controlled.md"].splitlines()[2]
    assert "kept" not in written["own.md"].splitlines()[2]
    runs = written["README.md"].split("## Runs\n", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in runs.splitlines() if line.startswith("| paper_controlled |"))
    assert kept in row
    # An entry written before provenance was recorded says so.
    stored = json.loads((out / "manifest.json").read_text())
    old = {k: v for k, v in stored["experiments"]["own"].items() if k not in ("provenance", "sha256")}
    stored["experiments"]["own"] = old | {"sha256": manifest.digest(old)}
    (out / "manifest.json").write_text(json.dumps(stored))
    analysed(tmp_path / "paper", out)
    assert "(commit and date not recorded; kept from an earlier manifest)" in pages(out)["own.md"]


def with_tepa_full(root: Path, passes_short: int = 0) -> Path:
    """TEPA-Full runs that are TEPA-Rev's episodes (as where its trials change nothing), 5 trials per
    promotion; the first seed's last `passes_short` trials fail."""
    for seed in SEEDS:
        source = root / "paper_controlled" / "controlled_drift" / "tepa_rev" / f"seed={seed}"
        target = source.parents[1] / "tepa_full" / f"seed={seed}"
        shutil.copytree(source, target)
        frame = pd.read_parquet(target / "episodes.parquet").assign(memory="tepa_full", trials=10)
        frame["trial_passes"] = 10 - (passes_short if seed == 0 else 0)
        frame.to_parquet(target / "episodes.parquet")
        reseal(target)
    return root


def test_tepa_full_equal_to_tepa_rev_is_explained_from_its_trial_counts(tmp_path):
    out = analysed(with_tepa_full(paper_runs(tmp_path / "runs")), tmp_path / "out")
    page = pages(out)["paper_controlled.md"]
    assert "### Why TEPA-Full equals TEPA-Rev here" in page
    runs = len(list(SEEDS))
    assert f"all {10 * runs} of its trials over {runs} runs passed" in page
    assert (
        "its promotions, revocations and re-promotions per run (1, 1, 1) equal TEPA-Rev's (1, 1, 1)" in page
    )
    assert any("TEPA-Full scores exactly as TEPA-Rev" in line for line in summary(out))
    out = analysed(with_tepa_full(paper_runs(tmp_path / "other"), passes_short=3), tmp_path / "out2")
    assert (
        f"{10 * runs - 3} of its {10 * runs} trials over {runs} runs passed"
        in pages(out)["paper_controlled.md"]
    )


@pytest.mark.parametrize("kept", [False, True])
def test_every_relative_link_in_the_generated_pages_resolves(tmp_path, kept):
    runs = with_tepa_full(paper_runs(tmp_path / "runs"))
    out = tmp_path / "results"
    out.mkdir()
    for report in ("calibration.md", "sensitivity.md"):  # the reader's reports the scorecard cites
        (out / report).write_text("# Report\n", encoding="utf-8")
    if kept:  # the paper's results kept, another experiment analysed beside them
        analysed(runs, out)
        for seed in SEEDS:
            write_run(tmp_path / "own", "own", "controlled_drift", "tepa_rev", seed)
        runs = tmp_path / "own"
    written = pages(analysed(runs, out))
    assert len(written) >= 2
    targets = {name: {anchor(h) for h in headings(text)} for name, text in written.items()}
    for name, text in written.items():
        for target in links(text):
            path, _, fragment = target.partition("#")
            if re.match(r"[a-z]+:", path):
                continue
            resolved = (out / name).parent / path if path else out / name
            if out.resolve() not in resolved.resolve().parents:  # into the project: its results/ folder
                resolved = ROOT / "results" / path
            assert resolved.exists(), f"{name}: {target}"
            if fragment and resolved.name in targets:
                assert fragment in targets[resolved.name], f"{name}: {target}"


def test_a_page_name_never_leaves_the_folder_nor_replaces_another_page():
    assert page_name("paper_controlled") == "paper_controlled.md"
    for name in ("README", "readme", "bench", "../escape", "a/b", ".hidden", "x\ny"):
        page = page_name(name)
        assert page.startswith("experiment-") and page.endswith(".md") and "/" not in page, name
    assert page_name("README") != page_name("readme")


def test_replace_removes_the_page_of_a_dropped_experiment_and_leaves_other_files_alone(tmp_path):
    out = analysed(paper_runs(tmp_path / "paper"), tmp_path / "out")
    for seed in SEEDS:
        write_run(tmp_path / "own", "own", "controlled_drift", "no_memory", seed)
    analysed(tmp_path / "own", out)
    (out / "notes.md").write_text("mine\n", encoding="utf-8")
    assert (out / "own.md").is_file()
    assert main(["--runs", str(tmp_path / "paper"), "--out", str(out), "--quiet", "--replace"]) == 0
    assert not (out / "own.md").exists() and (out / "paper_controlled.md").is_file()
    assert (out / "notes.md").read_text(encoding="utf-8") == "mine\n"
    assert "own.md" not in (out / "README.md").read_text(encoding="utf-8")


def test_the_same_runs_analysed_at_another_commit_and_day_rewrite_the_results_byte_for_byte(
    tmp_path, monkeypatch
):
    """Provenance names the runs that first produced an experiment's numbers: reanalysing them later (a
    fresh `make reproduce` of the same code) changes no committed file; other numbers get a new record."""
    from analysis.report import provenance

    runs, out = paper_runs(tmp_path / "runs"), tmp_path / "out"
    monkeypatch.setattr(provenance, "analysis_commit", lambda: "a" * 40)
    monkeypatch.setattr(provenance, "today", lambda: "2026-01-01")
    analysed(runs, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    monkeypatch.setattr(provenance, "analysis_commit", lambda: "b" * 40)
    monkeypatch.setattr(provenance, "today", lambda: "2026-02-02")
    analysed(runs, out)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    run = next(runs.rglob("tepa_rev/seed=0"))
    frame = pd.read_parquet(run / "episodes.parquet")
    frame["success"] = ~frame["success"]
    frame.to_parquet(run / "episodes.parquet", index=False)
    reseal(run)
    assert main(["--runs", str(runs), "--out", str(out), "--quiet", "--replace"]) == 0
    entry = json.loads((out / manifest.MANIFEST).read_text())["experiments"]["paper_controlled"]
    assert entry["provenance"]["analysis_commit"] == "b" * 40
