"""`make reproduce` timed against a reference commit, back to back or side by side
(runners.bench.reference): which trees run which commands in which order and on which CPU, the ratios
and the scaled figures, and the report's rows. No timing of `make reproduce` is asserted (one fake
tree's CPU is held to the busy loop it runs)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runners.bench import reference
from runners.bench import suite as bench

ROOT = Path(__file__).resolve().parents[1]


def _repo(path: Path) -> str:
    """A repository at `path` with one commit holding `marker.txt`; its hash."""
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "marker.txt").write_text("reference tree\n")
    subprocess.run([*git, "add", "marker.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_pairs_alternate_which_tree_goes_first_and_take_the_median_of_their_ratios(tmp_path):
    commit = _repo(tmp_path / "repo")
    seen = []
    figures = iter([100, 50, 60, 120, 100, 70])  # reference, this; this, reference; reference, this

    def timer(tree: Path) -> dict:
        side = "this" if tree == tmp_path / "repo" else "reference"
        assert (tree / "marker.txt").read_text() == "reference tree\n"  # the commit's tree, extracted
        seen.append(side)
        value = float(next(figures))
        return {"wall_s": value, "cpu_s": 2 * value, "analysis_s": value / 10}

    out = reference.paired(commit[:7], tmp_path / "repo", pairs=3, timer=timer)
    assert seen == ["reference", "this", "this", "reference", "reference", "this"]
    assert out["commit"] == commit and len(out["pairs"]) == 3
    assert out["ratios"] == {"wall_s": 0.5, "cpu_s": 0.5, "analysis_s": 0.5}  # median of 0.5, 0.5, 0.7
    assert "scaled" not in out  # only the targets' reference has figures to scale by


def test_against_the_targets_reference_this_trees_figures_are_scaled_to_its_machine(tmp_path, monkeypatch):
    commit = _repo(tmp_path / "repo")
    monkeypatch.setitem(reference.TARGET_REFERENCE, "commit", commit)
    sides = iter(
        [
            {"wall_s": 200.0, "cpu_s": 400.0, "analysis_s": 10.0},
            {"wall_s": 100.0, "cpu_s": 300.0, "analysis_s": 4.0},
        ]
    )
    out = reference.paired(commit, tmp_path / "repo", timer=lambda tree: next(sides))
    assert out["ratios"] == {"wall_s": 0.5, "cpu_s": 0.75, "analysis_s": 0.4}
    expected = {f: round(r * reference.TARGET_REFERENCE[f], 1) for f, r in out["ratios"].items()}
    assert out["scaled"] == expected


def test_a_failed_timing_stops_the_pairs_and_is_named(tmp_path):
    commit = _repo(tmp_path / "repo")
    sides = iter(
        [
            {"failed": "runners.launch.reproduce: exit 1: boom"},
            {"wall_s": 1.0, "cpu_s": 1.0, "analysis_s": 1.0},
        ]
    )
    out = reference.paired(commit, tmp_path / "repo", pairs=2, timer=lambda tree: next(sides))
    assert len(out["pairs"]) == 1 and "ratios" not in out
    assert out["failed"] == "reference: runners.launch.reproduce: exit 1: boom"


def _fake_tree(tree: Path, reproduce: str, analysis: str) -> Path:
    """A tree whose `make reproduce` commands run the scripts `reproduce` and `analysis`."""
    for package in ("runners", "runners/launch", "analysis"):
        (tree / package).mkdir(parents=True)
        (tree / package / "__init__.py").write_text("")
    (tree / "runners/launch/reproduce.py").write_text(reproduce)
    (tree / "analysis/__main__.py").write_text(analysis)
    return tree


def test_a_tree_is_timed_running_its_own_reproduce_and_analysis_commands(tmp_path):
    tree = tmp_path / "tree"
    _fake_tree(
        tree,
        "import pathlib, sys\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--results-dir') + 1])\n"
        "(out / 'runs').mkdir(parents=True)\n"
        "(out / 'runs' / 'by').write_text(__file__)\n",
        "import pathlib, sys\n"
        "runs = pathlib.Path(sys.argv[sys.argv.index('--runs') + 1])\n"
        "assert (runs / 'by').read_text().startswith("
        + repr(str(tree))
        + "), 'not the tree s own reproduce'\n"
        "assert sys.argv[-1] == '--quiet'\n",
    )
    out = reference.time_tree(tree)
    assert set(out) == {"wall_s", "cpu_s", "analysis_s"} and out["wall_s"] >= out["analysis_s"] >= 0
    (tree / "analysis/__main__.py").write_text("import sys; print('no runs', file=sys.stderr); sys.exit(3)\n")
    assert reference.time_tree(tree) == {"failed": "-m analysis: exit 3: no runs"}


def test_an_unknown_reference_stops_the_benchmark_with_the_option_named(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--only", "reproduce", "--reference", "not-a-commit"])
    err = capsys.readouterr().err
    assert "--reference not-a-commit: not a commit of the repository" in err


def test_the_scaled_figures_are_rows_of_the_targets_and_the_pairs_a_paragraph_of_the_report():
    report = json.loads((ROOT / "results" / "bench.json").read_text())
    commit = reference.TARGET_REFERENCE["commit"]
    pair = {"reference": {"wall_s": 200.0, "cpu_s": 400.0}, "this": {"wall_s": 100.0, "cpu_s": 210.0}}
    report["reproduce"] = dict(
        report["reproduce"],
        reference={
            "commit": commit,
            "pairs": [pair],
            "ratios": {"wall_s": 0.5, "cpu_s": 0.525, "analysis_s": 0.6},
            "scaled": {"wall_s": 97.3, "cpu_s": 198.8, "analysis_s": 5.6},
        },
    )
    rows = {t["figure"]: t for t in bench.targets(report)}
    scaled = "scaled to the targets' reference machine"
    assert rows[f"make reproduce: wall seconds, {scaled}"]["met"] is True
    assert rows[f"make reproduce: CPU seconds, {scaled}"]["value"] == 198.8
    assert rows[f"make reproduce: the analysis, wall seconds, {scaled}"]["met"] is False
    md = bench.render_markdown(report)
    assert f"Timed against commit {commit[:7]} back to back, 1 pair(s)" in md
    assert "0.525 x its CPU time" in md and "that is 97.3 s, 198.8 CPU s and 5.6 s" in md
    del report["reproduce"]["reference"]
    rows = {t["figure"]: t for t in bench.targets(report)}
    assert rows[f"make reproduce: wall seconds, {scaled}"]["met"] is None  # not measured


def test_make_bench_times_against_the_targets_reference():
    recipe = (ROOT / "Makefile").read_text().split("\nbench:")[1].split("\n\n")[0]
    assert "-m runners.bench --out results/bench.json --reference" in recipe


def test_together_a_pairs_trees_run_at_the_same_time_on_swapped_cpus_and_the_first_done_keeps_running(
    tmp_path, monkeypatch
):
    commit = _repo(tmp_path / "repo")
    monkeypatch.setattr(reference, "two_cpus", lambda: (3, 5))
    both_started = threading.Barrier(2, timeout=10)
    calls = []
    lock = threading.Lock()

    def timer(tree: Path, cpu: int, lane=None) -> dict:
        side = "this" if tree == tmp_path / "repo" else "reference"
        with lock:
            calls.append((side, cpu, lane is not None))
        if lane is not None:  # a filler: runs until the other side's timing ends and stops it
            deadline = time.monotonic() + 10
            while not lane.stopped and time.monotonic() < deadline:
                time.sleep(0.01)
            assert lane.stopped
            return {"wall_s": 0.0, "cpu_s": 0.0, "analysis_s": 0.0}
        both_started.wait()  # neither timing starts alone
        if side == "reference":
            time.sleep(0.2)  # ends last: this tree fills in meanwhile
        value = 100.0 if side == "reference" else 60.0
        return {"wall_s": value, "cpu_s": 2 * value, "analysis_s": value / 10}

    out = reference.paired(commit, tmp_path / "repo", pairs=2, timer=timer, together=True)
    timed = [(side, cpu) for side, cpu, filler in calls if not filler]
    assert sorted(timed[:2]) == [("reference", 3), ("this", 5)]  # pair 1: the reference on the first CPU
    assert sorted(timed[2:]) == [("reference", 5), ("this", 3)]  # pair 2: swapped
    assert ("this", 5, True) in calls and ("this", 3, True) in calls  # the first done kept its CPU busy
    assert not any(side == "reference" and filler for side, _, filler in calls)
    assert out["together"] is True and out["ratios"] == {"wall_s": 0.6, "cpu_s": 0.6, "analysis_s": 0.6}


def test_stopping_a_lane_kills_its_command_and_every_process_it_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    lane = reference.Lane()
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(run=reference._run([sys.executable, "-c", script], tmp_path, lane))
    )
    thread.start()
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    lane.stop()
    thread.join(timeout=20)
    assert not thread.is_alive() and result["run"][0] == -signal.SIGKILL
    for _ in range(200):  # the grandchild, orphaned and killed, is reaped by init
        if not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild):
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins processes to CPUs (Linux)")
def test_a_tree_timed_on_a_cpu_runs_there_with_one_slot_and_counts_only_its_own_cpu(tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    tree = _fake_tree(
        tmp_path / "tree",
        "import os, pathlib, sys, time\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--results-dir') + 1])\n"
        "(out / 'runs').mkdir(parents=True)\n"
        "(out / 'seen').write_text(repr((sorted(os.sched_getaffinity(0)), sys.argv[-2:])))\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n",
        "import pathlib, sys\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\n"
        f"assert (out / 'seen').read_text() == {repr(repr(([cpu], ['--slots', '1'])))}\n",
    )
    before = os.sched_getaffinity(0)
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=reference.time_tree(tree, cpu)))
    thread.start()
    thread.join()
    assert os.sched_getaffinity(0) == before  # the timing thread's pin, not this one's
    assert "failed" not in result["out"], result["out"]
    assert 0.25 <= result["out"]["cpu_s"] < 5  # its commands' CPU, the busy loop included


def test_the_report_says_when_a_pairs_trees_ran_at_the_same_time_and_the_command_names_the_options():
    report = json.loads((ROOT / "results" / "bench.json").read_text())
    pair = {"reference": {"wall_s": 400.0, "cpu_s": 400.0}, "this": {"wall_s": 280.0, "cpu_s": 280.0}}
    report["reproduce"] = dict(
        report["reproduce"],
        reference={
            "commit": reference.TARGET_REFERENCE["commit"],
            "pairs": [pair],
            "ratios": {"wall_s": 0.7, "cpu_s": 0.7, "analysis_s": 0.8},
            "together": True,
        },
    )
    md = bench.render_markdown(report)
    assert "at the same time, each on its own CPU with one slot" in md and "back to back" not in md
    args = bench.parse_args(
        ["--only", "reproduce", "--reference", "--reference-together", "--reference-pairs", "2"]
    )
    assert "--reference c21320c --reference-pairs 2 --reference-together" in bench._meta(args)["command"]


def test_together_a_failed_timing_runs_no_filler_and_the_pair_is_named_failed(tmp_path, monkeypatch):
    commit = _repo(tmp_path / "repo")
    monkeypatch.setattr(reference, "two_cpus", lambda: (0, 1))
    calls = []

    def timer(tree: Path, cpu: int, lane=None) -> dict:
        side = "this" if tree == tmp_path / "repo" else "reference"
        calls.append((side, lane is not None))
        if side == "reference":
            return {"failed": "runners.launch.reproduce: exit 1: boom"}
        time.sleep(0.2)
        return {"wall_s": 1.0, "cpu_s": 1.0, "analysis_s": 1.0}

    out = reference.paired(commit, tmp_path / "repo", pairs=2, timer=timer, together=True)
    assert sorted(calls) == [("reference", False), ("this", False)]  # one pair, no fillers
    assert out["failed"] == "reference: runners.launch.reproduce: exit 1: boom" and out["together"] is True
