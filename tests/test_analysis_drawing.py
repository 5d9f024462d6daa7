"""Figures drawn in a second process while the analysis computes: the same bytes as drawn in this
process, written only by the analysis itself, and no worker left behind however the analysis ends."""

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

import analysis.__main__ as cli
from analysis.data.load import load_runs
from analysis.metrics.compute import analyse
from analysis.report.figures import metric_jobs, success_jobs, timeline_jobs
from tests.test_analysis_outputs import ROOT, runs_root  # noqa: F401  (runs_root: the shared fixture)


def test_figures_drawn_by_the_drawing_process_are_the_bytes_drawn_here(runs_root):  # noqa: F811
    logs = load_runs(runs_root)
    jobs = success_jobs(logs.episodes, logs.runs, 10) + metric_jobs(analyse(logs, window=10))
    jobs += timeline_jobs(logs.runs, logs.events, runs_root)
    here = [job() for job in jobs]
    with cli.drawing_process() as drawing:
        there = [future.result() for future in [drawing.submit(job) for job in jobs]]
    assert there == here
    assert {d.name for d in here if d is not None} == {
        "success_over_time_paper_controlled_controlled_drift.png",
        "mpi_paper_controlled.png",
        "sweep_sweep_thresholds_controlled_drift_tepa_rev.png",
    }


def test_jobs_the_drawing_process_has_not_started_are_drawn_here_in_order():
    with cli.drawing_process() as drawing:
        busy = cli.submit(drawing, [partial(time.sleep, 0.5)] * 3)  # one running, the queue full
        waiting = cli.submit(drawing, [os.getpid, os.getpid])
        results = cli.collect(busy + waiting)
    assert results == [None, None, None, os.getpid(), os.getpid()]


def test_the_drawing_process_ignores_ctrl_c_which_its_parent_handles():
    with cli.drawing_process() as drawing:
        worker = drawing.submit(os.getpid).result()
        os.kill(worker, signal.SIGINT)
        assert drawing.submit(os.getpid).result() == worker
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
def test_no_drawing_process_outlives_an_interrupted_or_failed_analysis(
    runs_root,  # noqa: F811
    tmp_path,
    monkeypatch,
    failure,
):
    def fail(*args, **kwargs):
        raise failure("stop")

    monkeypatch.setattr(cli, "analyse", fail)
    argv = ["--runs", str(runs_root), "--out", str(tmp_path / "out"), "--quiet"]
    if failure is KeyboardInterrupt:
        assert cli.main(argv) == 130  # Ctrl-C: one line, no traceback
    else:
        with pytest.raises(failure):
            cli.main(argv)
    assert multiprocessing.active_children() == []
    assert list((tmp_path / "out").iterdir()) == []  # figures already drawn are not written


def test_no_drawing_process_outlives_a_refused_input(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert cli.main(["--runs", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert multiprocessing.active_children() == []


def test_the_drawing_process_ends_when_the_analysis_is_killed():
    code = (
        "import os, signal, analysis.__main__ as cli\n"
        "with cli.drawing_process() as drawing:\n"
        "    print(drawing.submit(os.getpid).result(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == -signal.SIGKILL
    worker = Path(f"/proc/{int(result.stdout)}")
    deadline = time.monotonic() + 10
    while worker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not worker.exists()
