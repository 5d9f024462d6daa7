"""End to end: synthetic run directories -> load -> tables, figures, README; plus the loader's rules."""

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.data.load import load_runs
from analysis.report.tables import Table, interval, latex_escape, number, pvalue, to_latex, to_markdown
from analysis.streamlog.stream import file_record
from tests.helpers.report_pages import all_text, pages

ROOT = Path(__file__).resolve().parents[1]
PHASES = (("stable", 30), ("full_reversal", 30), ("partial_reversal", 30), ("return", 30))
LEVEL = {"no_memory": 0.3, "append_only": 0.2, "oracle_reset": 0.85, "tepa_rev": 0.8}
SEEDS = 8  # enough for every interval and test (analysis.stats.MIN_BOOTSTRAP_SEEDS)


def write_run(
    root: Path,
    experiment: str,
    env: str,
    memory: str,
    seed: int,
    *,
    phases=PHASES,
    complete: bool = True,
    config: dict | None = None,
    subdir: str = "",
) -> Path:
    """One run directory in the runner's layout, with success drawn around a per-method level."""
    run = root / experiment / env / memory / f"seed={seed}" / subdir
    run.mkdir(parents=True)
    rng = np.random.default_rng([seed, len(memory), len(env)])
    rows, t = [], 0
    for phase, length in phases:
        for _ in range(length):
            level = LEVEL.get(memory, 0.2) if phase != "stable" or memory == "no_memory" else 0.8
            rows.append(
                {"experiment": experiment, "env": env, "memory": memory, "seed": seed, "t": t, "phase": phase}
                | {"key": f"k{t % 3}", "action": "a", "correct": "a", "success": bool(rng.random() < level)}
                | {"parse_ok": True, "reply": "a", "n_evidence": 1, "prompt_tokens": 50 + t, "cached": False}
                | {"completion_tokens": 1, "latency": 0.0, "hypothesis": 0, "active": 1, "revoked": 0}
                | ({"promotions": 1, "trials": t // 10} if memory == "tepa_rev" else {})
            )
            t += 1
    pd.DataFrame(rows).to_parquet(run / "episodes.parquet")
    events = [{"t": 3, "event": "promoted"}, {"t": 40, "event": "revoked"}, {"t": 95, "event": "repromoted"}]
    archive = "".join(json.dumps(e) + "\n" for e in events) if memory == "tepa_rev" else ""
    (run / "archive.jsonl").write_text(archive)
    meta = {"config": config or {"memory": {"name": memory}}, "complete": complete}
    record_files(run, len(rows), archive.count("\n"), meta)
    # As the runner records them: the options the stream was built from, and no override of them.
    options = {"env": {"option": env}, "memory": {"option": memory}, "llm": {"option": "simulated"}}
    meta |= {"identity": options | {"seed": seed}, "variant": "", "overrides": {}}
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def record_files(run: Path, episodes: int, events: int, meta: dict) -> None:
    """Record in `meta` the checksums of the run's files, as the runner does."""
    files = {"episodes.parquet": episodes, "archive.jsonl": events}
    meta["files"] = {name: file_record((run / name).read_bytes(), rows) for name, rows in files.items()}


def reseal(run: Path) -> None:
    """Record the checksums of a run's files as they are now in its meta.json (after a test changed
    them on purpose, so that the analysis checks what it reads rather than stopping at the checksum)."""
    meta = json.loads((run / "meta.json").read_text())
    episodes = len(pd.read_parquet(run / "episodes.parquet"))
    record_files(run, episodes, (run / "archive.jsonl").read_text().count("\n"), meta)
    (run / "meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for memory in LEVEL:
        for seed in range(SEEDS):
            write_run(root, "paper_controlled", "controlled_drift", memory, seed)
    write_run(root, "paper_controlled", "controlled_drift", "lww", 0, complete=False)
    for theta_rev in (0.3, 0.5):
        for theta_rec in (0.4, 0.6):
            # As the runner writes a sweep: the grid point is in the memory label and the config.
            label = f"tepa_rev-theta_rev={theta_rev}-theta_rec={theta_rec}"
            memory = {"_target_": "tepa.tepa_rev.TEPARev", "label": label, "theta_rev": theta_rev}
            config = {"memory": memory | {"theta_rec": theta_rec, "top_k": 8}, "seed": 0}
            for seed in range(2):
                write_run(
                    root,
                    "sweep_thresholds",
                    "controlled_drift",
                    label,
                    seed,
                    phases=PHASES[:2],
                    config=config,
                )
    return root


def test_load_skips_incomplete_runs_and_fills_counters(runs_root):
    logs = load_runs(runs_root)
    assert len(logs.runs) == 4 * SEEDS + 4 * 2  # the incomplete LWW run is not read
    assert "lww" not in set(logs.episodes["memory"])
    assert "reply" not in logs.episodes
    no_memory = logs.episodes[logs.episodes["memory"] == "no_memory"]
    assert (no_memory["repromotions"] == 0).all() and no_memory["trials"].dtype == np.int64
    assert set(logs.events["event"]) == {"promoted", "revoked", "repromoted"}
    assert set(logs.events["memory"]) == {"tepa_rev"}
    assert all(logs.runs["config"].map(lambda c: c["complete"] is True))


def test_load_counts_every_run_of_a_shared_archive_and_names_the_first_faulty_one(runs_root, tmp_path):
    logs = load_runs(runs_root)  # the TEPA-Rev seeds log the same archive: parsed once, counted per run
    counted = logs.events[logs.events["memory"] == "tepa_rev"].groupby("seed")["count"].sum()
    assert counted.to_dict() == {seed: 3 for seed in range(SEEDS)}
    for seed in (1, 0):
        run = write_run(tmp_path, "paper_controlled", "controlled_drift", "tepa_rev", seed)
        (run / "archive.jsonl").write_text('{"t": -1, "event": "revoked"}\n')
        reseal(run)
    with pytest.raises(ValueError, match=r"seed=0/archive\.jsonl: t -1 is out of range"):
        load_runs(tmp_path)


def test_load_rejects_bad_logs(tmp_path):
    run = write_run(tmp_path / "a", "paper_controlled", "controlled_drift", "lww", 0)
    pd.read_parquet(run / "episodes.parquet").drop(columns="phase").to_parquet(run / "episodes.parquet")
    reseal(run)
    with pytest.raises(ValueError, match="phase"):
        load_runs(tmp_path / "a")
    for subdir in ("x", "y"):
        write_run(tmp_path / "b", "paper_controlled", "controlled_drift", "lww", 0, subdir=subdir)
    with pytest.raises(ValueError, match="identical"):
        load_runs(tmp_path / "b")
    write_run(tmp_path / "c", "paper_controlled", "controlled_drift", "lww", 0, complete=False)
    with pytest.raises(ValueError, match="no complete runs"):
        load_runs(tmp_path / "c")
    with pytest.raises(ValueError, match="root"):
        load_runs(tmp_path / "missing")


def test_cli_writes_deterministic_tables_figures_and_readme(runs_root, tmp_path):
    out = tmp_path / "results"
    assert main(["--runs", str(runs_root), "--out", str(out), "--quiet"]) == 0
    tables = {p.name: p.read_bytes() for p in sorted((out / "tables").iterdir())}
    figures = {p.name: p.read_bytes() for p in sorted((out / "figures").iterdir())}
    readme = (out / "README.md").read_text()
    for name in (
        "paper_drift",
        "success_paper_controlled",
        "mpi_paper_controlled",
        "paired_paper_controlled",
    ):
        for suffix in (".md", ".csv", ".tex"):
            assert f"{name}{suffix}" in tables
    assert {"adaptation_paper_controlled.csv", "cost_paper_controlled.csv"} <= set(tables)
    assert "sweep_sweep_thresholds.csv" in tables
    # Settings without runs are skipped, not rendered empty.
    assert not any(name.startswith(("paper_preference", "paper_memoryagentbench")) for name in tables)
    assert set(figures) == {
        "success_over_time_paper_controlled_controlled_drift.png",
        "mpi_paper_controlled.png",
        "sweep_sweep_thresholds_controlled_drift_tepa_rev.png",
    }
    assert all(data.startswith(b"\x89PNG") for data in figures.values())
    assert "simulated" in readme and "not a real LLM" in readme
    assert "![" in readme and "figures/mpi_paper_controlled.png" in all_text(out)  # the experiment's page
    assert "Success (paper)" in readme and "| controlled_drift | Append-Only |" in readme

    drift = pd.read_csv(out / "tables" / "paper_drift.csv").set_index("memory")
    assert drift.loc["no_memory", "paper"] == 0.309 and bool(drift.loc["append_only", "paper_approximate"])
    assert drift.loc["tepa_rev", "diff"] == pytest.approx(drift.loc["tepa_rev", "mean"] - 0.95, abs=1e-6)
    sweep = pd.read_csv(out / "tables" / "sweep_sweep_thresholds.csv")
    assert set(sweep["memory"]) == {"tepa_rev"} and set(sweep["n"]) == {2}
    assert set(sweep["phase"]) == {"stable", "full_reversal", "overall"}  # per phase, not only overall
    sweep = sweep[sweep["phase"] == "overall"]
    assert sorted(zip(sweep["theta_rec"], sweep["theta_rev"], strict=True)) == [
        (0.4, 0.3),
        (0.4, 0.5),
        (0.6, 0.3),
        (0.6, 0.5),
    ]

    (out / "tables" / "own_table.md").write_text("old")  # not written by the analysis: left alone
    assert main(["--runs", str(runs_root), "--out", str(out), "--quiet"]) == 0
    assert {p.name: p.read_bytes() for p in sorted((out / "tables").iterdir())} == tables | {
        "own_table.md": b"old"
    }
    assert {p.name: p.read_bytes() for p in sorted((out / "figures").iterdir())} == figures
    assert (out / "README.md").read_text() == readme


def test_others_to_writes_what_the_two_invocations_of_make_figures_write(runs_root, tmp_path):
    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    two, one = tmp_path / "two", tmp_path / "one"
    for out in (two, one):  # the committed results list paper_controlled; the sweep is a user's
        assert main(["--runs", str(runs_root), "--out", str(out), "--experiments", "paper_*", "--quiet"]) == 0
    runs = ["--runs", str(runs_root), "--quiet"]
    assert main([*runs, "--out", str(two / "report"), "--not-listed-in", str(two)]) == 0
    assert main([*runs, "--out", str(two), "--listed-in", str(two)]) == 0
    assert main([*runs, "--out", str(one), "--listed-in", str(one), "--others-to", str(one / "report")]) == 0
    assert "tables/sweep_sweep_thresholds.csv" in files(one / "report")
    assert files(one) == files(two)
    with pytest.raises(SystemExit):
        main([*runs, "--out", str(one), "--others-to", str(one / "report")])  # without --listed-in


def test_cli_reports_missing_runs(tmp_path):
    assert main(["--runs", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"), "--quiet"]) == 2


def test_formatting_is_fixed():
    assert (
        number(-0.0001) == "0.000" and number(0.5, signed=True) == "+0.500" and number(float("nan")) == "n/a"
    )
    assert number(float("-inf")) == "-inf"
    assert (
        interval(0.5, 0.4, 0.6) == "0.500 [0.400, 0.600]"
        and interval(0.5, float("nan"), float("nan")) == "0.500"
    )
    assert pvalue(0.0004) == "<0.001" and pvalue(0.03125) == "0.031"
    assert latex_escape("TEPA_Rev 50% ~0.31 & <0.001") == r"TEPA\_Rev 50\% $\sim$0.31 \& $<$0.001"
    table = Table("t", "A | B", ["Setting", "Value"], [["x|y", "1.000"]], pd.DataFrame(), labels=1, note="n")
    assert "| x\\|y | 1.000 |" in to_markdown(table) and "|---|--:|" in to_markdown(table)
    latex = to_latex(table)
    assert r"\begin{tabular}{lr}" in latex and r"\label{tab:t}" in latex and r"x|y & 1.000 \\" in latex


def test_analysis_reads_logs_only():
    """The analysis must not import the harness it analyses (the analysis reads logs only)."""
    code = (
        "import sys, analysis.__main__; "
        "harness = {'envs', 'runners', 'tepa', 'baselines'}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in harness); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_report_opens_with_the_scorecard_and_paired_tables_show_both_tests(runs_root, tmp_path):
    out = tmp_path / "results"
    assert main(["--runs", str(runs_root), "--out", str(out), "--quiet"]) == 0
    readme = (out / "README.md").read_text()
    assert readme.index("## Reproduction scorecard") < readme.index("## Runs") < readme.index("## Tables")
    first_table = readme[readme.index("\n|") :]
    assert first_table.startswith("\n| Setting | Phase | Number | Verdict |")
    card = pd.read_csv(out / "tables" / "scorecard.csv")
    beyond = card[card["experiment"] == "robustness_map"]  # the map's rows: not run, no map here
    assert len(beyond) == 5 and set(beyond["verdict"]) == {"not run"}
    assert len(card) == 23 + 5 and set(card["verdict"]) <= {
        "reproduced",
        "direction only",
        "not reproduced",
        "not run",
    }
    paired = pd.read_csv(out / "tables" / "paired_paper_controlled.csv")
    assert {"p", "p_holm", "p_boot", "p_boot_holm"} <= set(paired.columns)
    assert paired["p_boot"].between(1 / 10000, 1).all()
    page = pages(out)["paper_controlled.md"]  # the paired tests are on the experiment's page
    assert "| p (sign-flip) | Holm p (sign-flip) | p (bootstrap) | Holm p (bootstrap) |" in page
    assert "centred on 0 to impose the null, 9999 resamples" in page
    assert "exact sign-flip p = " in readme and "paired bootstrap p = " in readme  # the headline note


def test_the_two_level_option_widens_the_success_intervals(runs_root, tmp_path):
    seeds, both = tmp_path / "seeds", tmp_path / "both"
    assert main(["--runs", str(runs_root), "--out", str(seeds), "--quiet"]) == 0
    assert (
        main(["--runs", str(runs_root), "--out", str(both), "--quiet", "--intervals", "seeds+episodes"]) == 0
    )
    narrow = pd.read_csv(seeds / "tables" / "success_paper_controlled.csv")
    wide = pd.read_csv(both / "tables" / "success_paper_controlled.csv")
    assert (narrow["mean"] == wide["mean"]).all()
    assert ((wide["high"] - wide["low"]).mean()) > ((narrow["high"] - narrow["low"]).mean())
    assert "two-level percentile bootstrap CI: seeds, then episodes" in (both / "README.md").read_text()


def test_the_analysis_ends_with_the_scorecard_tally_and_the_page_to_open(runs_root, tmp_path, caplog):
    out = tmp_path / "results"
    with caplog.at_level(logging.INFO, logger="analysis"):
        assert main(["--runs", str(runs_root), "--out", str(out)]) == 0
    last = caplog.records[-1].getMessage()
    card = pd.read_csv(out / "tables" / "scorecard.csv")
    assert last.startswith(f"scorecard: {len(card)} rows, ") and last.endswith(str(out / "README.md"))
    for verdict, count in card["verdict"].value_counts().items():
        assert f"{count} {verdict}" in last
