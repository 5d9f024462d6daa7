"""`make reproduce`'s progress (runners.launch.progress): while a small sweep runs through
runners.launch.reproduce, a log gets plain progress lines with its streams done / total, the run ends
with a summary naming the file to open, and the sweep's two jobs carry distinct bar labels."""

import io
import json
import os
import re
import sys
import tempfile

from runners.launch import progress, reproduce
from runners.launch.reproduce import Step

PY = sys.executable


def tiny_sweep(results_dir) -> list[str]:
    """Two jobs that differ only in a swept value (both labelled `adhoc preference_stream tepa_rev`
    before), two seeds each, a few episodes: 4 streams."""
    return [
        PY, "-m", "runners.run", "-m", "hydra/launcher=joblib", f"results_dir={results_dir}",
        "env=preference_stream", "memory=tepa_rev", "memory.theta_rev=0.3,0.5", "seeds=[0,1]",
        "max_episodes=10", "progress=true",
    ]  # fmt: skip


def test_a_logged_reproduce_prints_progress_lines_a_summary_and_distinct_job_labels(
    tmp_path, monkeypatch, capsys
):
    results = tmp_path / "res"
    monkeypatch.setattr(
        reproduce, "steps", lambda results_dir: [Step("sweep", None, tiny_sweep(results_dir))]
    )
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.2)
    assert reproduce.main(["--results-dir", str(results)]) == 0
    out, err = capsys.readouterr()

    lines = [line for line in err.splitlines() if line.startswith("progress ")]
    assert lines and "\r" not in err  # a log gets whole lines, no redrawn bar
    assert all(re.search(r"\| streams sweep \d+/(4|\?)", line) and "ep/s" in line for line in lines)
    assert "streams sweep 4/4 ended" in lines[-1]  # the line printed as the experiment ended

    summary = [line for line in out.splitlines() if line.startswith("summary:")]
    assert re.fullmatch(r"summary: \d+:\d\d wall \([\d.]+ s\); streams done: sweep 4/4", summary[0])
    assert summary[1].endswith(f"then open {results / 'README.md'}")

    # the jobs' own bars (progress=true) in the experiment's output: one label per job, its swept value
    labels = set(re.findall(r"(?m)(?:^|\r)(adhoc[^\r\n]*?): +\d+%\|", out))
    assert len(labels) == 2, labels
    assert sorted("memory.theta_rev=0.3" in label for label in labels) == [False, True]
    assert all(label.startswith("adhoc ") and "memory.theta_rev=0." in label for label in labels)


def test_on_a_terminal_the_line_is_redrawn_in_place_and_cleared_before_other_output():
    screen = io.StringIO()
    shown = progress.Progress(stream=screen, tty=True)
    shown.add("other", [PY, "-c", "pass"])  # not a runners.run command: its total stays unknown
    shown.tick(force=True)
    shown.tick(force=True)
    assert "\n" not in screen.getvalue() and screen.getvalue().count("\r") == 2
    assert "streams other 0/?" in screen.getvalue() and "time left: estimating" in screen.getvalue()
    shown.clear()
    assert screen.getvalue().endswith("\r\x1b[K")


def test_the_clock_reads_minutes_and_hours():
    assert [progress.clock(s) for s in (0, 65.4, 3725)] == ["0:00", "1:05", "1:02:05"]


def test_streams_finished_before_the_start_are_not_counted_and_skipped_ones_come_from_the_jobs_lines(
    tmp_path,
):
    seen = io.StringIO()
    watching = progress.Progress(stream=seen, tty=False)
    log = tempfile.TemporaryFile()
    command = [PY, "-m", "runners.run", "-m", f"results_dir={tmp_path}", "name=demo", "seeds=[0,1,2,3,4]"]
    watching.add("demo", command, log)
    watching.watched["demo"].composing.join(60)
    assert watching.watched["demo"].total == 5  # one job, five seeds
    runs = tmp_path / "runs" / "demo" / "controlled_drift" / "tepa_rev"
    for seed, episodes in ((0, 7), (1, 11)):
        (runs / f"seed={seed}").mkdir(parents=True)
        (runs / f"seed={seed}" / "meta.json").write_text(json.dumps({"n_episodes": episodes}))
    old = runs / "seed=0" / "meta.json"
    os.utime(old, (watching.start_wall - 60, watching.start_wall - 60))  # an earlier run's stream
    log.write(b"[x][runners.run][INFO] - 5 stream(s): 3 run, 2 skipped (complete); 0 episode(s)\n")
    log.flush()
    watching.tick(force=True)
    assert "streams demo 3/5 |" in seen.getvalue()  # seed=1 finished now, two skipped by the job
    assert watching.watched["demo"].episodes == 11
    watching.ended("demo", ok=True)
    assert seen.getvalue().splitlines()[-1].startswith("progress ")
    assert "streams demo 5/5 ended" in seen.getvalue().splitlines()[-1]
    log.close()


def test_a_sweeps_total_counts_every_jobs_seeds_and_other_commands_have_none(tmp_path):
    run = [PY, "-m", "runners.run", "-m", f"results_dir={tmp_path}"]
    assert progress.sweep_total([*run, "seed=0,1,2", "memory=lww,no_memory"], tmp_path) == (
        6,
        tmp_path / "runs" / "adhoc",
    )
    both = [*run, "experiment=paper_controlled,paper_preference", "memory=lww"]
    assert progress.sweep_total(both, tmp_path) == (20 + 10, tmp_path / "runs")  # two experiments' folders
    assert progress.sweep_total([PY, "-c", "pass"], tmp_path) is None


def test_the_time_left_is_the_slot_time_the_remaining_streams_need_over_the_slots(tmp_path):
    seen = io.StringIO()
    watching = progress.Progress(stream=seen, tty=False, workers=2)
    run = [PY, "-m", "runners.run", "-m", f"results_dir={tmp_path}"]
    watching.add("slow", [*run, "name=slow", "seeds=[0,1,2,3]", "memory=lww,no_memory"])  # 8 streams
    watching.add("late", [*run, "name=late", "seeds=[0,1]"])  # 2 streams, none finished yet
    for name in ("slow", "late"):
        watching.watched[name].composing.join(60)
    assert watching.line().endswith("time left: estimating")  # nothing finished: no rate yet
    job = tmp_path / "runs" / "slow" / "controlled_drift" / "lww"
    for seed, wall in ((0, 9.0), (1, 10.0)):  # one job's streams run together: its slot time is 10 s
        (job / f"seed={seed}").mkdir(parents=True)
        (job / f"seed={seed}" / "meta.json").write_text(json.dumps({"n_episodes": 5, "wall_time_s": wall}))
    watching.tick(force=True)
    # slow: 6 streams left at 10 s / 2 streams = 5 s each; late: 2 streams at the average, 5 s; 2 slots
    assert watching.line().endswith("about 0:20 left"), watching.line()
    watching.ended("slow", ok=True)
    assert watching.line().endswith("about 0:05 left")  # only late's two streams remain
    watching.ended("late", ok=True)
    assert watching.line().endswith("time left: 0:00")
