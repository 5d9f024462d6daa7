"""The analysis on a user's own runs rather than the paper's: a folder holding only a sweep, runs of a
configuration that is not the paper experiment's, and an `--out` that already holds other results."""

from __future__ import annotations

import pandas as pd

from analysis.__main__ import main
from tests.test_analysis_outputs import PHASES, write_run


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


def test_a_paper_experiment_run_with_other_settings_is_a_variant_named_in_the_scorecard_and_titles(tmp_path):
    from tests.helpers.runner import run_overrides

    for memory in ("no_memory", "append_only", "lww", "tepa_rev"):
        run_overrides(
            "experiment=paper_controlled", f"memory={memory}", "env.phase_length=20", "seeds=[0,1]",
            f"results_dir={tmp_path}", "progress=false",
        )  # fmt: skip
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 0
    card = pd.read_csv(out / "tables" / "scorecard.csv", keep_default_na=False)
    controlled = card[card["experiment"] == "paper_controlled"]
    assert set(controlled["verdict"]) == {"variant"}
    assert set(controlled["reason"]) == {"not the paper's configuration: env.phase_length=20"}
    readme = (out / "README.md").read_text()
    assert "### paper_controlled (env.phase_length=20): success per phase" in readme
    assert (
        "### Drift settings, full reversal: success and MPI, ours vs the paper: "
        "paper_controlled (env.phase_length=20)" in readme
    )
    assert "![paper_controlled (env.phase_length=20) / controlled_drift: success over time" in readme
    assert "![paper_controlled (env.phase_length=20): memory pollution index" in readme


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


def test_a_long_figure_title_stays_inside_the_figure():
    from matplotlib.figure import Figure

    from analysis.report.figures import render, set_title

    figure = Figure(figsize=(7, 4.2), layout="constrained")
    figure.add_subplot().bar([0], [1], label="x")
    figure.legend(loc="outside right upper")
    set_title(figure, "paper_preference (env.n_keys=3; llm.lapse=0.1): memory pollution index (> 0: worse)")
    render(figure)
    box = figure._suptitle.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= figure.bbox.x1 and box.y1 <= figure.bbox.y1


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
    out = tmp_path / "out"
    assert main(["--runs", str(root), "--out", str(out), "--quiet"]) == 0
    assert (out / "figures" / "lifecycle_own.png").read_bytes().startswith(b"\x89PNG")
    assert (
        "![own / controlled_drift: precedents of key k0 over time (seed 0)" in (out / "README.md").read_text()
    )
    cost = pd.read_csv(out / "tables" / "cost_own.csv").set_index(["memory", "metric"])
    assert (
        cost.loc[("mine", "revocations"), "mean"] == 1
        and cost.loc[("keep_first", "revocations"), "mean"] == 0
    )
