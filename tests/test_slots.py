"""CPU slots across processes (runners.launch.slots): at most N jobs at once, the most urgent waiting
job first, a killed holder or waiter never blocks the others, a pinned slot runs its holder on its CPU,
and a run of `python -m runners.run` waits for a slot when `make reproduce` shares them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runners.config import ConfigError
from runners.launch import slots
from tests.helpers.runner import cli

ROOT = Path(__file__).resolve().parents[1]


def holder(
    folder: Path, priority: int, tag: str, log: Path, release: Path | None = None
) -> subprocess.Popen[str]:
    """A process that takes a slot, appends `tag` to `log` when it has it, and keeps it until `release`
    exists (None: gives it back at once)."""
    code = textwrap.dedent(f"""
        import os, time
        from runners.launch import slots
        with slots.held():
            with open({str(log)!r}, "a") as out:
                out.write({tag!r} + "\\n")
            while {str(release) if release else ""!r} and not os.path.exists({str(release)!r}):
                time.sleep(0.02)
    """)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        slots.SLOTS_ENV: str(folder),
        slots.PRIORITY_ENV: str(priority),
    }
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True)


def waiting(folder: Path, n: int, timeout: float = 20.0) -> None:
    """Wait until `n` processes wait for a slot of `folder` (their markers are there)."""
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("waiting-*"))) < n:
        assert time.monotonic() < deadline, f"fewer than {n} waiters after {timeout} s"
        time.sleep(0.02)


def wait_for_lines(log: Path, n: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = log.read_text().split() if log.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"only {log.read_text() if log.exists() else ''!r} after {timeout} s")


def test_without_a_slot_folder_holding_a_slot_does_nothing():
    with slots.held({}) as number:
        assert number is None


def test_no_more_jobs_than_slots_run_at_once_and_the_most_urgent_waiting_job_goes_next(tmp_path):
    folder, log, release = slots.create(tmp_path / "slots", 1), tmp_path / "log", tmp_path / "release"
    first = holder(folder, 5, "first", log, release)
    assert wait_for_lines(log, 1) == ["first"]
    later = holder(folder, 3, "later", log)  # less urgent, but waiting first
    waiting(folder, 1)
    urgent = holder(folder, 0, "urgent", log)
    waiting(folder, 2)
    assert log.read_text().split() == ["first"]  # one slot: both wait
    release.touch()
    for proc in (first, later, urgent):
        assert proc.wait(timeout=30) == 0
    assert log.read_text().split() == ["first", "urgent", "later"]


def test_a_killed_holder_frees_its_slot_and_a_dead_waiter_blocks_nobody(tmp_path):
    folder, log = slots.create(tmp_path / "slots", 1), tmp_path / "log"
    (folder / "waiting-0-999999999").touch()  # a waiter killed while waiting: nobody holds its marker
    stuck = holder(folder, 1, "stuck", log, tmp_path / "never")
    assert wait_for_lines(log, 1) == ["stuck"]
    stuck.send_signal(signal.SIGKILL)
    stuck.wait()
    start = time.monotonic()
    with slots.held({slots.SLOTS_ENV: str(folder), slots.PRIORITY_ENV: "1"}) as number:
        assert number == 0 and time.monotonic() - start < 5
    assert not (folder / "waiting-0-999999999").exists()


@pytest.mark.skipif(not slots.PINNABLE, reason="CPU affinity is Linux-only")
def test_a_pinned_slot_runs_its_holder_on_its_cpu_and_gives_the_cpus_back_after(tmp_path):
    before = os.sched_getaffinity(0)
    folder = slots.create(tmp_path / "slots", 1)
    with slots.held({slots.SLOTS_ENV: str(folder)}):
        assert os.sched_getaffinity(0) == {min(before)}
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert child.stdout.strip() == str([min(before)])  # the processes a job starts share its CPU
    assert os.sched_getaffinity(0) == before


def test_a_slot_folder_is_checked(tmp_path):
    with pytest.raises(ValueError, match="positive integer"):
        slots.create(tmp_path / "s", 0)
    with pytest.raises(ConfigError, match="not a slot folder"), slots.held({slots.SLOTS_ENV: str(tmp_path)}):
        pass
    with pytest.raises(ConfigError, match="TEPA_JOB_PRIORITY must be an integer"):
        with slots.held({slots.SLOTS_ENV: str(slots.create(tmp_path / "s", 1)), slots.PRIORITY_ENV: "x"}):
            pass


def test_a_run_waits_for_a_free_slot_before_its_first_episode(tmp_path):
    folder = slots.create(tmp_path / "slots", 1)
    env = {slots.SLOTS_ENV: str(folder)}
    args = ["experiment=paper_controlled", "memory=lww", "seeds=[0]", "max_episodes=4", "progress=false"]
    with slots.held(env):
        run = subprocess.Popen(
            [sys.executable, "-m", "runners.run", *args, f"results_dir={tmp_path / 'results'}"],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        waiting(folder, 1)  # the run has checked its config and waits for the slot
        time.sleep(0.5)
        assert run.poll() is None and not (tmp_path / "results" / "runs").exists()
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out
    assert list((tmp_path / "results" / "runs").rglob("episodes.parquet"))
    assert cli(tmp_path, *args, f"results_dir={tmp_path / 'results'}", env=env).returncode == 0  # slot free
