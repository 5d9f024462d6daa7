"""The analysis on a user's own runs rather than the paper's: a folder holding only a sweep, runs of a
configuration that is not the paper experiment's, and an `--out` that already holds other results."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.__main__ import main
from tests.helpers.report_pages import all_text, pages
from tests.test_analysis_outputs import PHASES, reseal, write_run


def sweep_runs(root, seeds=(0, 1)):
    """A threshold sweep as the runner writes it: the grid point in the memory label and the config."""
    for theta_rev in (0.3, 0.5):
        label = f"tepa_rev-theta_rev={theta_rev}-theta_rec=0.5"
        memory = {"_target_": "tepa.tepa_rev.TEPARev", "label": label, "theta_rev": theta_rev}
        for seed in seeds:
            config = {"memory": memory, "seed": seed}
            write_run(root, "sweep_thresholds", "controlled_drift", label, seed, phases=PHASES, config=config)


def test_a_folder_holding_only_a_sweep_is_analysed_with_its_success_per_phase(tmp_path):
    sweep_runs(tmp_path / "runs")
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 0
    sweep = pd.read_csv(out / "tables" / "sweep_sweep_thresholds.csv")
    assert list(dict.fromkeys(sweep["phase"])) == [*(p for p, _ in PHASES), "overall"]
    table = (out / "tables" / "sweep_sweep_thresholds.md").read_text()
    assert (
        "| Setting | Method | theta_rev | stable | full_reversal | partial_reversal | return | overall |"
        in table
    )
    assert "(n=2, no CI)" in table


def analysed_drift(tmp_path, *overrides: str) -> tuple:
    """Four methods of a drift experiment on seeds 0-1 under `overrides`, analysed into tmp_path/out: the
    output folder and its scorecard."""
    from tests.helpers.runner import run_overrides

    for memory in ("no_memory", "append_only", "lww", "tepa_rev"):
        run_overrides(
            *overrides, f"memory={memory}", "seeds=[0,1]", f"results_dir={tmp_path}", "progress=false"
        )
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 0
    return out, pd.read_csv(out / "tables" / "scorecard.csv", keep_default_na=False)


def test_a_paper_experiment_run_with_other_settings_is_a_variant_named_in_the_scorecard_and_titles(tmp_path):
    out, card = analysed_drift(tmp_path, "experiment=paper_controlled", "env.phase_length=20")
    controlled = card[card["experiment"] == "paper_controlled"]
    assert set(controlled["verdict"]) == {"variant"}
    assert set(controlled["reason"]) == {"not the paper's configuration: env.phase_length=20"}
    readme = (out / "README.md").read_text()
    assert "## paper_controlled (env.phase_length=20): success per phase" in pages(out)["paper_controlled.md"]
    assert (
        "### Drift settings, full reversal: success and MPI, ours vs the paper: "
        "paper_controlled (env.phase_length=20)" in readme
    )
    assert "![paper_controlled (env.phase_length=20) / controlled_drift: success over time" in readme
    assert "![paper_controlled (env.phase_length=20): memory pollution index" in all_text(out)


def test_real_model_drift_runs_fill_the_paper_controlled_rows_as_variants_that_name_each_difference(tmp_path):
    out, card = analysed_drift(tmp_path, "experiment=llm_drift", "llm=simulated", "env.phase_length=8")
    controlled = card[card["experiment"] == "paper_controlled"]
    assert len(controlled) == 7 and set(controlled["verdict"]) == {"variant"}  # 6 numbers and a p claim
    (reason,) = set(controlled["reason"])
    assert reason == (
        "not the paper's configuration: env.actions, env.phase_length=8, env.phases, "
        "env=controlled_drift_words, experiment=llm_drift"
    )  # llm=simulated is the paper experiment's reader: not a difference
    ours = controlled.set_index(["method", "metric"])["ours"]
    success = pd.read_csv(out / "tables" / "success_llm_drift.csv")
    lww = success[(success["memory"] == "lww") & (success["phase"] == "full_reversal")]["mean"].item()
    assert float(ours[("lww", "success")]) == pytest.approx(lww)
    assert (card[card["experiment"] == "paper_executable"]["verdict"] == "not run").all()


def test_a_run_of_the_paper_configuration_departs_in_nothing(tmp_path):
    from analysis.data.load import load_runs
    from analysis.reference.configuration import paper_departures
    from tests.helpers.runner import run_overrides

    run_overrides(
        "experiment=paper_controlled", "memory=lww", "seeds=[0]", f"results_dir={tmp_path}", "progress=false"
    )
    run_overrides(
        "experiment=paper_controlled", "memory=lww", "llm.lapse=0.1", "max_episodes=5", "seeds=[0]",
        f"results_dir={tmp_path}", "progress=false",
    )  # fmt: skip
    departures = paper_departures(load_runs(tmp_path / "runs").runs)
    assert sorted(departures["departs"]) == ["", "llm.lapse=0.1, max_episodes=5"]


def test_a_long_figure_title_stays_inside_the_figure_and_clear_of_its_legend():
    from matplotlib.figure import Figure

    from analysis.report.figures import render, set_title

    figure = Figure(figsize=(7, 4.2), layout="constrained")
    ax = figure.add_subplot()
    ax.bar([0], [1], label="Append-Only")
    legend = figure.legend(loc="outside right upper")
    set_title(ax, "paper_preference (env.n_keys=3; llm.lapse=0.1): memory pollution index (> 0: worse)")
    render(figure)
    figure.draw_without_rendering()
    box = ax.title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= legend.get_window_extent().x0 and box.y1 <= figure.bbox.y1


def test_an_mpi_figure_without_any_defined_mpi_is_not_drawn():
    from analysis.report.figures import mpi_bars

    nan = float("nan")
    frame = pd.DataFrame(
        [{"experiment": "e", "env": "v", "memory": m, "phase": "q"} | dict(mean=nan, low=nan, high=nan, n=10)
         for m in ("lww", "tepa_rev")]
    )  # fmt: skip
    assert mpi_bars(frame, {("e", "v"): ["q"]}, "e") is None
    assert mpi_bars(frame.assign(mean=0.2, low=0.1, high=0.3), {("e", "v"): ["q"]}, "e") is not None


def test_identical_success_curves_say_which_curve_hides_them():
    from analysis.report.figures import success_curves

    rows = pd.DataFrame(
        [{"memory": m, "seed": 0, "t": t, "phase": "p", "success": t % 2 == 0 or m == "lww"}
         for m in ("tepa_rev", "tepa_rev-counts=lifetime", "lww") for t in range(10)]
    )  # fmt: skip
    labels = {m: label for m, (_, label) in success_curves(rows, 3).items()}
    assert labels == {
        "lww": "LWW",
        "tepa_rev": "TEPA-Rev",
        "tepa_rev-counts=lifetime": "tepa_rev-counts=lifetime (same curve as TEPA-Rev)",
    }


def test_a_custom_memory_with_lifecycle_events_gets_a_timeline_and_its_revocations_counted(tmp_path):
    import json

    root = tmp_path / "runs"
    for memory in ("keep_first", "mine"):
        for seed in range(2):
            run = write_run(root, "own", "controlled_drift", memory, seed)
            if memory == "mine":
                fields = {"id": 0, "key": "k0", "value": "a", "s": 1, "f": 0}
                events = [
                    fields | {"t": 1, "event": "created", "state": "active"},
                    fields | {"t": 40, "event": "revoked", "state": "revoked"},
                    fields | {"t": 41, "event": "created", "id": 1, "value": "b", "state": "active"},
                ]
                (run / "archive.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
                reseal(run)
    out = tmp_path / "out"
    assert main(["--runs", str(root), "--out", str(out), "--quiet"]) == 0
    assert (out / "figures" / "lifecycle_own.png").read_bytes().startswith(b"\x89PNG")
    assert "![own / controlled_drift: precedents of key k0 over time (seed 0)" in pages(out)["own.md"]
    cost = pd.read_csv(out / "tables" / "cost_own.csv").set_index(["memory", "metric"])
    assert (
        cost.loc[("mine", "revocations"), "mean"] == 1
        and cost.loc[("keep_first", "revocations"), "mean"] == 0
    )


def _files(folder) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _data(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files but the pages (README.md and the experiment pages, which say what was kept)."""
    return {name: data for name, data in files.items() if "/" in name or not name.endswith(".md")}


def _paper_runs(root, seeds=range(8)):
    for memory in ("no_memory", "append_only", "lww", "tepa_rev"):
        for seed in seeds:
            write_run(root, "paper_controlled", "controlled_drift", memory, seed)


def test_results_of_experiments_absent_from_the_runs_are_kept_as_a_full_analysis_gives_them(tmp_path, caplog):
    import logging
    import shutil

    paper, own, both = tmp_path / "paper", tmp_path / "own", tmp_path / "both"
    _paper_runs(paper)
    for seed in range(8):
        write_run(own, "own", "controlled_drift", "keep_first", seed)
        write_run(own, "own", "controlled_drift", "no_memory", seed)
    shutil.copytree(paper, both)
    shutil.copytree(own, both, dirs_exist_ok=True)
    out, full = tmp_path / "out", tmp_path / "full"
    assert main(["--runs", str(paper), "--out", str(out), "--quiet"]) == 0
    before = _files(out)
    with caplog.at_level(logging.WARNING, logger="analysis"):
        assert main(["--runs", str(own), "--out", str(out), "--quiet"]) == 0
    assert [r.getMessage() for r in caplog.records if r.name == "analysis"] == [
        f"analysis: kept the results in {out} of paper_controlled (no runs of them under {own}; "
        "--replace drops them)"
    ]
    after = _files(out)
    kept = [name for name in before if "paper_controlled" in name and name != "paper_controlled.md"]
    assert kept and all(after[name] == before[name] for name in kept)
    assert after["tables/scorecard.md"] == before["tables/scorecard.md"]
    # What is kept is what one analysis of all the runs gives, byte for byte (figures included); only
    # the pages differ, where the kept results say they are kept.
    assert main(["--runs", str(both), "--out", str(full), "--quiet"]) == 0
    assert _data(after) == _data(_files(full))
    assert "kept from the manifest of" in after["paper_controlled.md"].decode()
    assert "kept from" not in _files(full)["paper_controlled.md"].decode()
    readme = after["README.md"].decode()
    assert "| paper_controlled | No Memory, Append-Only, LWW, TEPA-Rev |" in readme and "| own |" in readme
    # And rerunning the paper runs alone now keeps the user's experiment in turn.
    assert main(["--runs", str(paper), "--out", str(out), "--quiet"]) == 0
    again = _files(out)
    assert _data(again) == _data(after) and "kept from the manifest of" in again["own.md"].decode()


def test_recomputing_an_experiment_from_fewer_runs_is_refused_unless_replace_is_given(tmp_path, caplog):
    import logging

    full, subset, out = tmp_path / "full", tmp_path / "subset", tmp_path / "out"
    _paper_runs(full)
    _paper_runs(subset, seeds=range(2))
    assert main(["--runs", str(full), "--out", str(out), "--quiet"]) == 0
    before = _files(out)
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert main(["--runs", str(subset), "--out", str(out), "--quiet"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert error.startswith(
        f"analysis: --out {out} holds results of paper_controlled computed from 24 run(s)"
    )
    assert "--replace replaces them" in error and "\n" not in error
    assert _files(out) == before
    assert main(["--runs", str(subset), "--out", str(out), "--quiet", "--replace"]) == 0
    assert pd.read_csv(out / "tables" / "success_paper_controlled.csv")["n"].max() == 2
    write_run(tmp_path / "own", "own", "controlled_drift", "lww", 0)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert main(["--runs", str(tmp_path / "own"), "--out", str(out), "--quiet", "--window", "5"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert (
        "holds results of paper_controlled computed with other options (" in error and "--window 20" in error
    )


def test_the_default_out_is_not_the_committed_results():
    from analysis.__main__ import parse_args

    assert parse_args([]).out.as_posix() == "results/report"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "unreadable (JSONDecodeError)"),
        ('{"version": 0, "experiments": {}}', "not a manifest of this analysis (version 1)"),
    ],
)
def test_a_damaged_manifest_is_one_line_naming_it_and_replace(tmp_path, caplog, content, problem):
    import logging

    write_run(tmp_path / "runs", "own", "controlled_drift", "lww", 0)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(content)
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert error == f"analysis: {out / 'manifest.json'}: {problem}; --replace rewrites it"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet", "--replace"]) == 0
