"""`make reproduce`'s experiments side by side (runners.launch.reproduce), with stand-in commands: they run at
the same time, a failed data check skips its experiment, a failure is reported with its exit status,
and SIGTERM reaches every experiment still running."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from runners.launch import reproduce
from runners.launch.reproduce import Step

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds}); print('slept')"]


def test_the_experiments_run_at_the_same_time_and_each_reports_when_it_ended(capsys):
    out = reproduce.run_side_by_side([Step("a", None, sleeper(1.0)), Step("b", None, sleeper(1.0))])
    assert set(out["steps_s"]) == {"a", "b"} and out["skipped_steps"] == []
    assert all(1.0 <= s < 1.9 for s in out["steps_s"].values())
    assert 1.0 <= out["wall_s"] < 1.9  # one after the other would take 2 s
    printed = capsys.readouterr().out
    assert printed.count("slept") == 2 and "--- a: exit 0 after" in printed


def test_a_failed_data_check_skips_its_experiment_and_a_failure_gives_its_exit_status(capsys):
    steps = [
        Step("ok", None, [PY, "-c", "pass"]),
        Step(
            "guarded",
            [PY, "-c", "print('no data here'); raise SystemExit(1)"],
            [PY, "-c", "raise SystemExit(9)"],
        ),
        Step("broken", None, [PY, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]),
    ]
    out = reproduce.run_side_by_side(steps)
    assert out["skipped_steps"] == ["guarded"] and set(out["steps_s"]) == {"ok", "broken"}
    assert out["failed"] == "broken: exit 3: boom" and out["exit_code"] == 3 and "wall_s" not in out
    assert "skipping guarded: no data here" in capsys.readouterr().out


def test_the_steps_are_the_paper_experiments_through_the_joblib_launcher_and_make_reproduce_runs_them():
    steps = reproduce.steps("/somewhere", python="py")
    assert sorted(s.name for s in steps) == sorted(
        p.stem for p in (ROOT / "conf" / "experiment").glob("paper_*.yaml")
    )
    for i, step in enumerate(steps):  # the longest first, with two jobs at a time; the others one
        assert step.command == [
            "py", "-m", "runners.run", "-m", "hydra/launcher=joblib", "results_dir=/somewhere",
            f"experiment={step.name}", *([] if i == 0 else ["hydra.launcher.n_jobs=1"]),
        ]  # fmt: skip
    assert steps[0].name == "paper_executable"
    assert [s.guard for s in steps if s.guard] == [["py", "-m", "envs.memoryagentbench.data"]]
    recipe = (ROOT / "Makefile").read_text().split("\nreproduce:")[1].split("\n\n")[0]
    assert "python -m runners.launch.reproduce --results-dir results" in recipe


def sleeping_children(pid: int) -> list[Path]:
    """The children of `pid` that run the test's 60-second sleep (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"time.sleep(60)" in (stat.parent / "cmdline").read_bytes():
                found.append(stat.parent)
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_sigterm_is_passed_on_to_every_experiment_still_running(tmp_path):
    script = tmp_path / "side_by_side.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from runners.launch import reproduce
            from runners.launch.reproduce import Step
            long = [{PY!r}, "-c", "import time; time.sleep(60)"]
            out = reproduce.run_side_by_side([Step("a", None, long), Step("b", None, long)], echo=False)
            print(out["failed"])
            """
        )
    )
    proc = subprocess.Popen([PY, str(script)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # both experiments started (imports take seconds on a loaded machine)
    while len(sleeping_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=30)
    assert time.monotonic() - start < 10  # not the experiments' 60 s
    assert "exit -15" in stdout  # each was stopped by the SIGTERM passed on


def test_the_experiments_share_one_slot_per_core_and_earlier_ones_come_first(capsys):
    env = "os.environ.get('TEPA_JOB_PRIORITY'), bool(os.environ.get('TEPA_JOB_SLOTS'))"
    show = [PY, "-c", f"import os; print('env', {env})"]
    reproduce.run_side_by_side([Step("a", None, show), Step("b", None, show)])
    # each step's output follows its "--- name:" line; either may end first
    blocks = dict(b.split(":", 1) for b in capsys.readouterr().out.split("--- ")[1:])
    assert "env 0 True" in blocks["a"] and "env 1 True" in blocks["b"]
    reproduce.run_side_by_side([Step("a", None, show)], slots=0)
    assert "env 0 False" in capsys.readouterr().out
