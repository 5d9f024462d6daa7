"""Results you can trust, through the real runner: every grid point of a sweep is its own stream, a
damaged stream is named, kept aside and redone, changed data is a new run, a damaged resume log
recovers, one process writes a stream, and SIGINT / SIGTERM stop a run promptly and resumably."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from analysis.data.load import load_runs
from analysis.streamlog.stream import ARCHIVE, EPISODES, META, PARTIAL_EPISODES, StreamLog, file_record
from envs.controlled_drift import ControlledDrift
from runners.bench import suite as bench
from runners.run import PROJECT_ROOT, RunSummary
from tests.helpers.runner import run_overrides
from tests.helpers.shared_data import require_data

TINY = "env.phase_length=5"  # controlled drift: 4 phases x 5 = 20 episodes per stream
ENV = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}


def run(results, *overrides: str) -> RunSummary:
    return run_overrides(f"results_dir={results}", *overrides)


def cli(results, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "runners.run", *args, f"results_dir={results}"]
    return subprocess.run(
        command, capture_output=True, text=True, cwd=results.parent, env=ENV, timeout=timeout
    )


def start(results, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "runners.run", *args, f"results_dir={results}", "progress=false"]
    return subprocess.Popen(
        command, cwd=results.parent, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def complete_metas(results) -> list[dict]:
    metas = [json.loads(p.read_text()) for p in sorted(results.glob(f"runs/**/seed=*/{META}"))]
    return [m for m in metas if m["complete"]]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def wait_for_lines(path, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") > n:
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} never had {n} lines (exit status {proc.poll()})")


# --- identity: sweeps ---------------------------------------------------------------------------------


def test_a_parallel_sweep_over_a_reader_parameter_keeps_both_grid_points(tmp_path):
    results = tmp_path / "r"
    args = ("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "memory=tepa_rev", "llm.lapse=0.0,0.5")
    proc = cli(results, *args, "seed=0", "env.phase_length=50")
    assert proc.returncode == 0, proc.stderr
    metas = complete_metas(results)
    assert sorted(m["config"]["llm"]["lapse"] for m in metas) == [0.0, 0.5]
    # the identity names config options, not class paths: moving a class keeps its runs
    assert {m["identity"]["memory"]["option"] for m in metas} == {"tepa_rev"}
    assert not any("_target_" in m["identity"][group] for m in metas for group in ("env", "memory", "llm"))
    assert sorted(m["variant"] for m in metas) == [
        "env.phase_length=50,llm.lapse=0.0",
        "env.phase_length=50,llm.lapse=0.5",
    ]


def test_the_readme_threshold_sweep_keeps_every_grid_point_and_a_rerun_skips_them(tmp_path):
    results = tmp_path / "r"
    args = ("-m", "memory=tepa_rev", "memory.theta_rev=0.3,0.4", "seed=0,1", "hydra/launcher=joblib", TINY)
    proc = cli(results, *args)
    assert proc.returncode == 0, proc.stderr
    points = sorted((m["config"]["memory"]["theta_rev"], m["seed"]) for m in complete_metas(results))
    assert points == [(0.3, 0), (0.3, 1), (0.4, 0), (0.4, 1)]
    again = cli(results, *args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("1 run, 0 skipped") == 0 and again.stdout.count("0 run, 1 skipped") == 4


# --- verified completeness ------------------------------------------------------------------------------


def _flip_a_middle_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


DAMAGE = {
    "a bit flip in the parquet": (EPISODES, _flip_a_middle_byte),
    "an emptied archive": (ARCHIVE, lambda path: path.write_bytes(b"")),
    "a garbled meta.json": (META, lambda path: path.write_bytes(path.read_bytes()[:-9])),
    "a half-truncated parquet": (
        EPISODES,
        lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_complete_stream_is_named_kept_aside_and_redone(tmp_path, caplog, damage):
    first = run(tmp_path, TINY, "memory=tepa_full")
    d = first.streams[0].directory
    original = {name: (d / name).read_bytes() for name in (EPISODES, ARCHIVE)}
    assert original[ARCHIVE], "the archive must have events for this test to mean anything"
    name, spoil = DAMAGE[damage]
    spoil(d / name)
    again = run(tmp_path, TINY, "memory=tepa_full")
    assert not again.streams[0].skipped and again.episodes_run == 20
    [line] = [m for m in warnings_of(caplog) if "moved the stream" in m]
    assert line.startswith(f"{d / name}: ")
    assert {n: (d / n).read_bytes() for n in original} == original  # redone, and equal to the first
    [aside] = d.parent.glob("seed=0.corrupt-*")
    assert (aside / META).is_file()  # kept, not deleted
    assert len(load_runs(tmp_path / "runs").runs) == 1  # the analysis does not count the kept copy


def test_the_analysis_stops_with_one_line_naming_a_damaged_file(tmp_path):
    summary = run(tmp_path, TINY, "memory=lww", "seeds=[0,1]")
    damaged = summary.streams[1].directory / EPISODES
    _flip_a_middle_byte(damaged)
    with pytest.raises(ValueError, match=re.escape(f"{damaged}: sha256 differs")) as error:
        load_runs(tmp_path / "runs")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("column", "spoil", "problem"),
    [
        ("success", lambda s: s.astype(str), "column success must hold booleans, found large_string"),
        ("t", lambda s: s.astype("Int64").mask(s.index == 3), "column t has 1 null value(s)"),
    ],
)
def test_the_analysis_reports_wrong_types_and_nulls_by_path_and_column(tmp_path, column, spoil, problem):
    summary = run(tmp_path, TINY, "memory=lww", "seeds=[0,1]")
    d = summary.streams[0].directory
    frame = pd.read_parquet(d / EPISODES)
    frame[column] = spoil(frame[column])
    frame.to_parquet(d / EPISODES)
    meta = json.loads((d / META).read_text())  # checksums that match: only the columns are wrong
    meta["files"][EPISODES] = file_record((d / EPISODES).read_bytes(), len(frame))
    (d / META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=re.escape(f"{d / EPISODES}: {problem}")):
        load_runs(tmp_path / "runs")


# --- data provenance ------------------------------------------------------------------------------------


def test_changed_data_is_a_new_run_and_restored_data_is_never_the_changed_runs_result(tmp_path):
    data, results = tmp_path / "data", tmp_path / "r"
    shutil.copytree(require_data() / "memoryagentbench", data / "memoryagentbench")
    shutil.copytree(require_data() / "mquake", data / "mquake")
    args = ("env=memoryagentbench", f"env.data_dir={data}", "memory=lww")
    assert cli(results, *args).returncode == 0
    [meta] = complete_metas(results)
    d = results / "runs" / "adhoc" / "memoryagentbench_sh_6k" / "lww" / "seed=0"
    reference = (d / EPISODES).read_bytes()
    cloze = data / "mquake" / "cloze_templates.json"
    assert (
        meta["identity"]["data"]["templates_sha256"]["cloze_templates.json"]
        == file_record(cloze.read_bytes(), 0)["sha256"]
    )
    original = cloze.read_bytes()
    templates = json.loads(original)
    templates["P26"] = "[X] has the spouse __"  # still valid, but other data
    cloze.write_text(json.dumps(templates))
    changed = cli(results, *args)
    assert changed.returncode == 0 and "0 run, 1 skipped" not in changed.stdout
    assert "differs in: data.templates_sha256.cloze_templates.json" in changed.stdout
    cloze.write_bytes(original)
    restored = cli(results, *args)
    assert restored.returncode == 0 and "0 run, 1 skipped" not in restored.stdout
    assert (d / EPISODES).read_bytes() == reference
    assert len(list(d.parent.glob("seed=0.other-config-*"))) == 2  # both earlier results kept


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{}", "expected a non-empty JSON object"),
        (b'{"P26": "[X] is married to', "not valid JSON"),
        (b'{"P26": "\xff"}', "not UTF-8 text"),
    ],
)
def test_a_bad_template_file_stops_the_run_with_one_line_naming_it(tmp_path, content, problem):
    data = tmp_path / "data"
    shutil.copytree(require_data() / "mquake", data / "mquake")
    (data / "memoryagentbench").mkdir()
    (data / "memoryagentbench" / "Conflict_Resolution.json").symlink_to(
        require_data() / "memoryagentbench" / "Conflict_Resolution.json"
    )
    (data / "mquake" / "cloze_templates.json").write_bytes(content)
    proc = cli(tmp_path / "r", "env=memoryagentbench", f"env.data_dir={data}", "memory=lww")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "cloze_templates.json" in x]
    assert problem in line
    assert not complete_metas(tmp_path / "r")


def test_a_bad_row_is_named_by_file_and_row(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(require_data() / "mquake", data / "mquake")
    rows = json.loads((require_data() / "memoryagentbench" / "Conflict_Resolution.json").read_text())
    rows[1]["answers"] = rows[1]["answers"][:-1]
    (data / "memoryagentbench").mkdir()
    (data / "memoryagentbench" / "Conflict_Resolution.json").write_text(json.dumps(rows))
    proc = cli(tmp_path / "r", "env=memoryagentbench", f"env.data_dir={data}", "memory=lww")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        "Conflict_Resolution.json: row 1 (" in proc.stderr and "100 questions but 99 answers" in proc.stderr
    )


# --- recoverable resume logs ----------------------------------------------------------------------------


class BreakingDrift(ControlledDrift):
    """Controlled drift that breaks at step `fail_at` (a class attribute, not config): a stream that
    stops at a known episode and leaves its partial log."""

    fail_at: int | None = None

    def execute(self, task, action):
        if task.t == self.fail_at:
            raise RuntimeError(f"broken at t={task.t}")
        return super().execute(task, action)


BREAKING = ("env=custom", f"env._target_={__name__}.BreakingDrift", "+env.phase_length=5", "memory=tepa_rev")


def _other_letter(rec: dict) -> dict:
    return {**rec, "reply": "Answer: " + next(x for x in "ABC" if x not in rec["reply"])}


def _without_reply(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "reply"}


DAMAGED_LINES = {  # what happens to the 7th logged episode (line 8), and how many episodes replay
    "a missing field": (lambda line: json.dumps(_without_reply(json.loads(line))).encode(), 6),
    "a changed reply": (lambda line: json.dumps(_other_letter(json.loads(line))).encode(), 6),
    "a 2 MB line": (lambda line: b'{"reply": "' + b"x" * (2 << 20) + b'"}', 6),
}


@pytest.mark.parametrize("damage", [*DAMAGED_LINES, "an unreadable header"])
def test_a_damaged_partial_log_is_kept_and_the_stream_recovers_to_the_uninterrupted_result(
    tmp_path, monkeypatch, caplog, damage
):
    monkeypatch.setattr(BreakingDrift, "fail_at", 12)
    with pytest.raises(RuntimeError, match="broken at t=12"):
        run(tmp_path / "a", *BREAKING)
    [partial] = (tmp_path / "a").glob(f"runs/**/{PARTIAL_EPISODES}")
    lines = partial.read_bytes().split(b"\n")
    assert len(lines) == 14  # the header, 12 episodes, the final newline
    if damage == "an unreadable header":
        lines[0], replayed = b"{not json", 0
    else:
        spoil, replayed = DAMAGED_LINES[damage]
        lines[7] = spoil(lines[7])
    partial.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(BreakingDrift, "fail_at", None)
    resumed = run(tmp_path / "a", *BREAKING)
    assert [(s.replayed, s.episodes_run) for s in resumed.streams] == [(replayed, 20 - replayed)]
    [line] = [m for m in warnings_of(caplog) if m.startswith(str(partial))]
    assert "kept as" in line
    assert len(list(partial.parent.glob(f"{PARTIAL_EPISODES}.damaged-*"))) == 1
    reference = run(tmp_path / "b", *BREAKING).streams[0].directory
    assert (partial.parent / EPISODES).read_bytes() == (reference / EPISODES).read_bytes()
    assert (partial.parent / ARCHIVE).read_bytes() == (reference / ARCHIVE).read_bytes()


def test_a_changed_config_keeps_the_partly_done_run_and_says_where_and_what_changed(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(BreakingDrift, "fail_at", 9)
    with pytest.raises(RuntimeError):
        run(tmp_path, *BREAKING)
    [partial] = tmp_path.glob(f"runs/**/{PARTIAL_EPISODES}")
    before = partial.read_bytes()
    monkeypatch.setattr(BreakingDrift, "fail_at", None)
    changed = run(tmp_path, *BREAKING, "memory.theta_rev=0.3")
    assert changed.streams[0].directory != partial.parent and changed.episodes_run == 20
    assert partial.read_bytes() == before  # kept where it was
    [line] = [m for m in warnings_of(caplog) if m.startswith(str(partial))]
    assert "9 episode(s)" in line and "differs in: memory.theta_rev" in line
    assert run(tmp_path, *BREAKING).streams[0].replayed == 9  # and its own config finishes it


# --- one writer per stream ------------------------------------------------------------------------------


def test_a_second_process_waits_for_the_stream_and_never_writes_beside_the_first(tmp_path):
    results = tmp_path / "r"
    d = results / "runs" / "adhoc" / "controlled_drift" / "lww" / TINY / "seed=0"
    holder = StreamLog(d, {})
    assert holder.try_acquire() is None  # this test holds the stream, as a first writer would
    proc = start(results, TINY, "memory=lww")
    try:
        line = proc.stdout.readline()
        while line and "being written by process" not in line:
            line = proc.stdout.readline()
        assert f"{d}: being written by process {os.getpid()}; waiting" in line
        time.sleep(0.5)
        assert not d.exists()  # it waited without writing
    finally:
        holder.release()
    assert proc.wait(timeout=120) == 0
    assert complete_metas(results)[0]["n_episodes"] == 20


def test_the_lock_of_a_killed_writer_does_not_hold_a_rerun(tmp_path):
    d = tmp_path / "runs" / "adhoc" / "controlled_drift" / "lww" / TINY / "seed=0"
    code = "import sys; from analysis.streamlog.stream import StreamLog; import pathlib, os, signal; "
    code += f"s = StreamLog(pathlib.Path({str(d)!r}), {{}}); assert s.try_acquire() is None; "
    code += "os.kill(os.getpid(), signal.SIGKILL)"
    killed = subprocess.run([sys.executable, "-c", code], env=ENV, timeout=60)
    assert killed.returncode == -signal.SIGKILL and d.with_name(".seed=0.lock").read_text().strip()
    assert run(tmp_path, TINY, "memory=lww").episodes_run == 20


# --- interrupts -----------------------------------------------------------------------------------------


def test_sigint_stops_a_run_within_two_seconds_and_the_rerun_resumes_to_the_uninterrupted_parquet(tmp_path):
    args = ("env.phase_length=2500", "memory=tepa_rev", "seed=1")  # 10,000 episodes
    results = tmp_path / "a"
    d = results / "runs" / "adhoc" / "controlled_drift" / "tepa_rev" / args[0] / "seed=1"
    proc = start(results, *args)
    wait_for_lines(d / PARTIAL_EPISODES, 300, proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    status = proc.wait(timeout=30)
    assert time.monotonic() - sent < 2.0
    output = proc.stdout.read()
    assert status == 128 + signal.SIGINT and "Traceback" not in output
    assert [x for x in output.splitlines() if x.startswith("stopped by SIGINT")], output
    logged = (d / PARTIAL_EPISODES).read_bytes().count(b"\n") - 1
    assert 300 <= logged < 10_000 and not (d / META).exists()
    rerun = cli(results, *args)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads((d / META).read_text())["replayed"] >= logged
    reference = run(tmp_path / "b", *args).streams[0].directory
    assert (d / EPISODES).read_bytes() == (reference / EPISODES).read_bytes()


def test_sigterm_stops_an_executable_run_and_removes_its_sandbox(tmp_path):
    sandboxes = tmp_path / "shm"
    sandboxes.mkdir()
    args = ("env=executable_drift", "env.phase_length=300", f"env.sandbox_dir={sandboxes}", "memory=lww")
    proc = start(tmp_path / "r", *args)
    [partial] = [None]
    deadline = time.monotonic() + 120
    while partial is None and time.monotonic() < deadline and proc.poll() is None:
        partial = next((tmp_path / "r").glob(f"runs/**/{PARTIAL_EPISODES}"), None)
        time.sleep(0.01)
    wait_for_lines(partial, 20, proc)
    assert list(sandboxes.glob("tepa-executable-*"))
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - sent < 2.0
    assert not list(sandboxes.glob("tepa-executable-*"))


def test_a_run_removes_the_sandbox_a_killed_run_left_behind(tmp_path):
    sandboxes = tmp_path / "shm"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = sandboxes / f"tepa-executable-{int(dead.stdout)}-x1y2" / "main"
    stale.mkdir(parents=True)
    alive = sandboxes / f"tepa-executable-{os.getpid()}-a1b2"  # a live process's: left alone
    alive.mkdir()
    run(
        tmp_path / "r",
        "env=executable_drift",
        "env.phase_length=2",
        f"env.sandbox_dir={sandboxes}",
        "memory=lww",
    )
    assert sorted(p.name for p in sandboxes.iterdir()) == [alive.name]


def test_the_analysis_tabulates_and_draws_a_sweep_over_any_key(tmp_path):
    for lapse in ("0.0", "0.5"):
        run(tmp_path, TINY, "memory=tepa_rev", f"llm.lapse={lapse}", "seeds=[0,1]")
    run(tmp_path, TINY, "memory=lww", "seeds=[0,1]")
    out = tmp_path / "out"
    assert analysis_main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--quiet"]) == 0
    sweep = pd.read_csv(out / "tables" / "sweep_adhoc.csv")
    sweep = sweep[sweep["phase"] == "overall"]
    assert sorted(zip(sweep["memory"], sweep["lapse"], sweep["n"], strict=True)) == [
        ("tepa_rev", 0.0, 2),
        ("tepa_rev", 0.5, 2),
    ]
    assert (out / "figures" / "sweep_adhoc_controlled_drift_tepa_rev.png").is_file()
    success = pd.read_csv(next((out / "tables").glob("success_adhoc*.csv")))
    assert set(success["memory"]) == {"lww"}  # grid points are not averaged as if they were seeds


def test_the_benchmark_times_verifying_every_stream(tmp_path):
    run(tmp_path, TINY, "memory=lww", "seeds=[0,1]")
    timing = bench.time_verification(tmp_path / "runs")
    assert timing["streams"] == 2 and timing["megabytes"] >= 0 and timing["seconds"] >= 0
    _flip_a_middle_byte(next((tmp_path / "runs").glob(f"**/seed=1/{EPISODES}")))
    with pytest.raises(RuntimeError, match="sha256"):
        bench.time_verification(tmp_path / "runs")
