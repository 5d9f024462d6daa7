"""SIGTERM to a joblib multirun once ended the launcher at once with 143 while its loky workers ran their
streams to the end, orphaned, each then taking the next job of the sweep. Now the launcher passes the
signal on, every worker stops within a couple of seconds with its partial log flushed, and the same
command resumes the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.streamlog.stream import META, PARTIAL_EPISODES
from runners.run import PROJECT_ROOT

# Three jobs of 10,000 episodes (controlled drift's four phases), two at a time: far more than the 300
# each has logged when the signal is sent, so no worker ends its job first and takes the third.
JOB_EPISODES = 10_000
SWEEP = (
    "-m",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    "memory=tepa_rev",
    "memory.theta_rev=0.3,0.4,0.5",
    f"env.phase_length={JOB_EPISODES // 4}",
    "progress=false",
)
ENV = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds workers through /proc")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def partial_logs(results: Path) -> dict[Path, int]:
    """Each partial log under `results` and its episode lines."""
    return {p: p.read_bytes().count(b"\n") - 1 for p in results.glob(f"runs/**/{PARTIAL_EPISODES}")}


def test_sigterm_to_a_joblib_multirun_stops_every_worker_and_the_rerun_resumes(tmp_path):
    results = tmp_path / "results"
    command = [sys.executable, "-m", "runners.run", *SWEEP, f"results_dir={results}"]
    out, err = tmp_path / "stdout", tmp_path / "stderr"  # files: a surviving worker holds no pipe open
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=stdout, stderr=stderr)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            logs = partial_logs(results)
            if len(logs) == 2 and min(logs.values()) >= 300:
                break
            time.sleep(0.05)
        workers = [pid for pid in children(proc.pid) if b"loky" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) >= 2, (proc.poll(), partial_logs(results))
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=30)
        stopped = time.monotonic() - sent
        while any(map(alive, workers)) and time.monotonic() - sent < 10:
            time.sleep(0.05)
        survivors = [pid for pid in workers if alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:  # this test's own processes, should any have survived
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert status == 128 + signal.SIGTERM and stopped < 4.0, (status, stopped, err.read_text())
    assert survivors == [], err.read_text()
    assert "stopped by SIGTERM" in out.read_text() and "Traceback" not in err.read_text()
    logged = partial_logs(results)
    time.sleep(1.0)
    assert partial_logs(results) == logged  # nothing writes on: no worker took the third job
    assert len(logged) == 2 and not list(results.glob(f"runs/**/{META}"))

    rerun = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    metas = [json.loads(p.read_text()) for p in sorted(results.glob(f"runs/**/{META}"))]
    assert len(metas) == 3 and all(m["complete"] and m["n_episodes"] == JOB_EPISODES for m in metas)
    assert sorted(m["replayed"] for m in metas) == [0, *sorted(logged.values())]


@pytest.mark.parametrize(
    "launcher",
    [("hydra/launcher=basic",), ("hydra/launcher=joblib", "hydra.launcher.n_jobs=1")],
    ids=["basic", "joblib-one-job-at-a-time"],
)
def test_sigterm_to_a_multirun_whose_jobs_run_in_its_own_process_stops_the_sweep_not_just_the_job(
    tmp_path, launcher
):
    # Hydra once recorded the stopped job as failed and started the next: the sweep ran on to its end.
    results = tmp_path / "results"
    sweep = [arg for arg in SWEEP if not arg.startswith("hydra")]
    command = [sys.executable, "-m", "runners.run", *sweep, *launcher, f"results_dir={results}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if any(n >= 300 for n in partial_logs(results).values()):
                break
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        stopped = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and stopped < 4.0, (proc.returncode, stopped, err)
    assert b"stopped by SIGTERM" in out and b"Traceback" not in err
    logged = partial_logs(results)
    assert len(logged) == 1 and not list(results.glob(f"runs/**/{META}"))  # the next job never started

    rerun = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    metas = [json.loads(p.read_text()) for p in sorted(results.glob(f"runs/**/{META}"))]
    assert len(metas) == 3 and all(m["complete"] and m["n_episodes"] == JOB_EPISODES for m in metas)
    assert sorted(m["replayed"] for m in metas) == [0, 0, *logged.values()]
