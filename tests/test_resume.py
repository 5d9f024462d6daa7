"""Interrupted streams resume to exactly the files an uninterrupted run writes; the log's atomic files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from analysis.streamlog.encoding import parquet_bytes
from analysis.streamlog.stream import (
    ARCHIVE,
    EPISODES,
    FLUSH_EVERY,
    META,
    PARTIAL_EPISODES,
    StreamLog,
    atomic_write_bytes,
)
from envs.controlled_drift import ControlledDrift
from runners.run import PROJECT_ROOT
from tests.helpers.runner import run_overrides


def run(results, *overrides: str):
    return run_overrides(f"results_dir={results}", *overrides)


class FlakyDrift(ControlledDrift):
    """Controlled drift whose execution breaks at step `fail_at` (a class attribute, so not part of the
    config): an interruption at a known episode."""

    fail_at: int | None = None

    def execute(self, task, action):
        if task.t == self.fail_at:
            raise RuntimeError(f"interrupted at t={task.t}")
        return super().execute(task, action)


FLAKY = (
    "env=custom",
    f"env._target_={__name__}.FlakyDrift",
    "+env.phase_length=6",
    "memory=tepa_rev",
    "seed=2",
)


def test_an_interrupted_stream_resumes_to_the_uninterrupted_files(tmp_path, monkeypatch):
    monkeypatch.setattr(FlakyDrift, "fail_at", 9)
    with pytest.raises(RuntimeError, match="interrupted at t=9"):
        run(tmp_path / "a", *FLAKY)
    d = tmp_path / "a" / "runs" / "adhoc" / "flakydrift" / "tepa_rev" / "env.phase_length=6" / "seed=2"
    assert not (d / META).exists()
    with open(d / PARTIAL_EPISODES, "a") as f:  # a torn last line, as a kill mid-write leaves it
        f.write('{"experiment": "adh')
    monkeypatch.setattr(FlakyDrift, "fail_at", None)
    resumed = run(tmp_path / "a", *FLAKY)
    assert [(s.replayed, s.episodes_run) for s in resumed.streams] == [(9, 24 - 9)]
    run(tmp_path / "b", *FLAKY)
    rel = d.relative_to(tmp_path / "a")
    for name in (EPISODES, ARCHIVE):
        assert (tmp_path / "a" / rel / name).read_bytes() == (tmp_path / "b" / rel / name).read_bytes()
    assert not (d / PARTIAL_EPISODES).exists()
    assert json.loads((d / META).read_text())["replayed"] == 9


def test_a_partial_log_of_another_config_is_kept_aside_and_not_replayed(tmp_path):
    d = tmp_path / "runs" / "adhoc" / "controlled_drift" / "lww" / "env.phase_length=3" / "seed=0"
    d.mkdir(parents=True)
    old = '{"fingerprint": "not-this-one"}\n{"t": 0, "reply": "Answer: A"}\n'
    (d / PARTIAL_EPISODES).write_text(old)
    summary = run(tmp_path, "env.phase_length=3", "memory=lww")
    assert [(s.replayed, s.episodes_run) for s in summary.streams] == [(0, 12)]
    [kept] = d.glob(f"{PARTIAL_EPISODES}.other-config-*")
    assert kept.read_text() == old


def test_a_run_killed_with_sigkill_resumes_to_an_identical_parquet(tmp_path):
    args = ["env.phase_length=500", "memory=tepa_rev", "seed=1"]  # 2000 episodes: long enough to kill
    cmd = [sys.executable, "-m", "runners.run", *args, f"results_dir={tmp_path / 'a'}"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    d = tmp_path / "a" / "runs" / "adhoc" / "controlled_drift" / "tepa_rev" / args[0] / "seed=1"
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            partial = d / PARTIAL_EPISODES
            if partial.exists() and partial.read_bytes().count(b"\n") > 300:
                break
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (d / META).exists()
    logged = (d / PARTIAL_EPISODES).read_bytes().count(b"\n") - 1
    assert 0 < logged < 2000

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    meta = json.loads((d / META).read_text())
    assert meta["complete"] and meta["replayed"] >= logged - 1 and meta["n_episodes"] == 2000

    run(tmp_path / "b", *args)
    rel = d.relative_to(tmp_path / "a")
    assert (d / EPISODES).read_bytes() == (tmp_path / "b" / rel / EPISODES).read_bytes()
    assert (d / ARCHIVE).read_bytes() == (tmp_path / "b" / rel / ARCHIVE).read_bytes()


# --- runlog ------------------------------------------------------------------------------------------


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "f.json"
    atomic_write_bytes(path, b"one")
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two" and os.listdir(path.parent) == ["f.json"]


def test_parquet_is_a_deterministic_function_of_the_records():
    records = [
        {"t": 0, "key": "a", "latency": 0.0, "ok": True},
        {"t": 1, "key": "b", "latency": 0.5, "n": (1, 2)},
    ]
    as_logged = [json.loads(json.dumps(r)) for r in records]  # what a resumed stream reads back
    assert parquet_bytes(records) == parquet_bytes(records) == parquet_bytes(as_logged)


def test_completeness_needs_every_file_and_the_mark(tmp_path):
    log = StreamLog(tmp_path / "s", {"seed": 0})
    assert not log.is_complete()
    log.open([])
    log.append({"t": 0}, [{"event": "promote"}])
    assert not log.is_complete()
    log.finish([{"t": 0}], [{"event": "promote"}], {"seed": 0})
    assert log.is_complete() and sorted(os.listdir(log.dir)) == [ARCHIVE, EPISODES, META]
    (log.dir / ARCHIVE).unlink()
    assert not log.is_complete()


def test_the_partial_log_is_written_in_whole_batches_and_completely_on_close(tmp_path, monkeypatch):
    monkeypatch.setattr("analysis.streamlog.stream.FLUSH_EVERY_S", 3600.0)  # batches by count only
    log = StreamLog(tmp_path / "s", {"seed": 0})
    log.open([])
    partial = log.dir / PARTIAL_EPISODES
    for t in range(FLUSH_EVERY + 5):
        log.append({"t": t}, [])
    assert partial.read_text().count("\n") == 1 + FLUSH_EVERY  # the header and one whole batch
    log.close()
    logged = [json.loads(line)["t"] for line in partial.read_text().splitlines()[1:]]
    assert logged == list(range(FLUSH_EVERY + 5))
