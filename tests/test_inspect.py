"""The run inspector: the prompt a run sent (logged; for a run that logged none, the harness command that
rebuilds it exactly by replaying the stream's log when its data is unchanged), the reply, the outcome and
the precedents, for any memory that logs events."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.inspect import main, timeline, timeline_title
from analysis.report.timeline import busiest_key, read_lifecycle
from analysis.streamlog.record import SAMPLE
from analysis.streamlog.stream import EPISODES, META, file_record
from envs.controlled_drift import ControlledDrift
from runners.agent.replay import main as replay
from runners.agent.replay import replay_decision
from runners.llm.backend import Reply, Request
from runners.llm.simulated.reader import SimulatedBackend
from runners.run import PROJECT_ROOT
from tests.helpers.report_pages import all_text
from tests.helpers.runner import run_overrides


class RecordingBackend(SimulatedBackend):
    """The simulated reader, keeping every request it was sent (class-wide: the runner builds it)."""

    sent: ClassVar[list[Request]] = []

    async def complete(self, request: Request) -> Reply:
        RecordingBackend.sent.append(request)
        return await super().complete(request)


def run_recorded(
    results: Path, env: str, memory: str, *more: str, phase_length: int = 8
) -> tuple[Path, list[Request]]:
    RecordingBackend.sent = []
    overrides = [
        f"results_dir={results}",
        f"env={env}",
        f"env.phase_length={phase_length}",
        f"memory={memory}",
        "seed=3",
        f"llm._target_={__name__}.RecordingBackend",
        *more,
    ]
    summary = run_overrides(*overrides)
    return summary.streams[0].directory, list(RecordingBackend.sent)


@pytest.mark.parametrize(
    ("env", "memory"), [("executable_drift", "tepa_rev"), ("controlled_drift", "append_only")]
)
def test_the_replay_rebuilds_every_prompt_the_run_sent(tmp_path, env, memory):
    # each step's replay rebuilds the environment and replays the stream up to it: short phases
    run_dir, sent = run_recorded(tmp_path, env, memory, phase_length=4)
    steps = pq.read_table(run_dir / "episodes.parquet", columns=["t"]).column("t").to_pylist()
    assert len(sent) == len(steps) == 4 * 4  # four phases
    for t, request in zip(steps, sent, strict=True):
        decision = replay_decision(run_dir, t)
        assert decision.prompts == [request.messages]


def test_the_inspector_prints_prompt_reply_outcome_and_precedents(tmp_path, capsys):
    run_dir, sent = run_recorded(tmp_path, "controlled_drift", "tepa_rev", "log_prompts=true")
    out = tmp_path / "figure.png"
    assert main([str(run_dir), "--t", "12", "--timeline", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert sent[12].messages[1]["content"] in text and sent[12].messages[0]["content"] in text
    assert "--- reply ---\nAnswer: " in text and "--- outcome ---" in text
    assert "--- precedents of key" in text and " created: first observation" in text
    assert out.read_bytes().startswith(b"\x89PNG")


def test_the_inspector_names_a_missing_step_in_one_line(tmp_path, capsys):
    run_dir, _ = run_recorded(tmp_path, "controlled_drift", "lww")
    assert main([str(run_dir), "--t", "999"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--t 999: no episode at this step" in error
    assert main([str(run_dir), "--timeline", "--out", str(tmp_path / "x.png")]) == 2
    assert "no lifecycle events" in capsys.readouterr().err


def test_the_inspectors_log_reading_and_drawing_need_no_harness(tmp_path):
    run_dir, _ = run_recorded(tmp_path, "controlled_drift", "tepa_rev")
    rewrite_log(run_dir, without_samples)  # not even to show a prompt the run did not log
    code = (
        "import sys; from analysis.inspect import main; "
        f"args = [{str(run_dir)!r}, '--t', '9', '--timeline', '--out', {str(tmp_path / 't.png')!r}]; "
        "assert main(args) == 0; "
        "harness = {'envs', 'runners', 'tepa', 'baselines'}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in harness); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--- prompt: not logged ---" in result.stdout


def test_the_report_shows_lifecycle_timelines_of_tepa_rev_and_tepa_norev(tmp_path):
    from analysis.__main__ import main as analyse

    for memory in ("tepa_rev", "tepa_norev", "no_memory"):
        overrides = [
            f"results_dir={tmp_path}",
            "name=paper_controlled",
            "env.phase_length=30",
            f"memory={memory}",
        ]
        run_overrides(*overrides, "seeds=[0,1]")
    assert analyse(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    report = all_text(tmp_path / "out")  # README.md and the experiment's own page
    assert "![paper_controlled (env.phase_length=30) / controlled_drift: precedents of key" in report
    assert "(figures/lifecycle_paper_controlled.png)" in report
    assert (
        (tmp_path / "out" / "figures" / "lifecycle_paper_controlled.png").read_bytes().startswith(b"\x89PNG")
    )


# --- logged samples, refusals, any memory's events ------------------------------------------------


class FileDrift(ControlledDrift):
    """Controlled drift that reads a data file: its sha256 is the stream's provenance."""

    def __init__(self, data_file: str = "", phase_length: int = 8) -> None:
        super().__init__(phase_length=phase_length)
        self.provenance = {"data_sha256": hashlib.sha256(Path(data_file).read_bytes()).hexdigest()}


def tiny_stream(results: Path, *overrides: str) -> Path:
    length = "+env.phase_length=8" if "env=custom" in overrides else "env.phase_length=8"
    summary = run_overrides(f"results_dir={results}", length, "seed=1", *overrides)
    return summary.streams[0].directory


def rewrite_log(run_dir: Path, change) -> None:
    """Rewrite episodes.parquet through `change(rows) -> rows` and record its new checksum, as a run that
    wrote those rows would have (the inspector verifies the files first)."""
    rows = change(pq.read_table(run_dir / EPISODES).to_pylist())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    data = sink.getvalue().to_pybytes()
    (run_dir / EPISODES).write_bytes(data)
    meta = json.loads((run_dir / META).read_text())
    meta["files"][EPISODES] = file_record(data, len(rows))
    (run_dir / META).write_text(json.dumps(meta))


def with_samples(prompt: bool):
    def change(rows):
        for r in rows:
            r["options"] = json.dumps(["red", "blue"])
            r["evidence"] = json.dumps([[[3, "VALID", "red", 2, 0], [5, "FAILED", "blue", None, None]]])
            r["truth"] = json.dumps(["blue"])
            messages = [{"role": "system", "content": "logged system"}, {"role": "user", "content": "logged"}]
            r["prompt"] = json.dumps([messages]) if prompt else ""
        return rows

    return change


def without_samples(rows):
    """The rows as a log written before episodes recorded what their prompt held."""
    return [{k: v for k, v in r.items() if k not in SAMPLE} for r in rows]


def unbuildable(run_dir: Path) -> None:
    """meta.json's config names a class that does not import here (as without its PYTHONPATH)."""
    meta = json.loads((run_dir / META).read_text())
    meta["config"]["memory"]["_target_"] = "not_on_this_path.Memory"
    (run_dir / META).write_text(json.dumps(meta))


def test_the_inspector_shows_a_logged_prompt_without_replaying(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    rewrite_log(run_dir, with_samples(prompt=True))
    unbuildable(run_dir)  # a replay would fail: the logged prompt needs none
    assert main([str(run_dir), "--t", "9"]) == 0
    text = capsys.readouterr().out
    assert "--- prompt: system (logged) ---\nlogged system\n--- prompt: user (logged) ---\nlogged\n" in text
    assert "rebuilt" not in text


def test_the_inspector_shows_logged_memory_lines_and_options_when_the_prompt_was_not_logged(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    rewrite_log(run_dir, with_samples(prompt=False))
    unbuildable(run_dir)
    assert main([str(run_dir), "--t", "9"]) == 0
    text = capsys.readouterr().out
    assert '- [step 3] VALID "red" (support 2, conflicts 0)\n- [step 5] FAILED "blue"\n' in text
    assert 'the world\'s value now: "blue"' in text and "options: A) red, B) blue" in text


def test_the_inspector_escapes_terminal_control_characters_of_a_reply(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=lww")

    def hostile(rows):
        rows[2]["reply"] = "Answer: A\x1b]0;owned\x07\x1b[2J\r"
        return rows

    rewrite_log(run_dir, hostile)
    step = pq.read_table(run_dir / EPISODES).column("t").to_pylist()[2]
    assert main([str(run_dir), "--t", str(step)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "Answer: A\\x1b]0;owned\\x07\\x1b[2J\\r" in text


def test_the_inspector_names_the_replay_command_for_a_run_that_logged_no_prompt(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    rewrite_log(run_dir, without_samples)  # an older log: only a replay could show its prompt
    assert main([str(run_dir), "--t", "9"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "--- reply ---" in out and "--- precedents of key" in out
    command = f"python -m runners.agent.replay {run_dir} --t 9"
    assert f"--- prompt: not logged ---\n(this run logged no samples; `{command}` rebuilds it)\n" in out
    assert replay(shlex.split(command)[3:]) == 0  # the command as printed
    assert "--- prompt: user (rebuilt by replay) ---" in capsys.readouterr().out


def test_a_replay_of_a_run_whose_class_does_not_import_here_is_refused_in_one_line(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    rewrite_log(run_dir, without_samples)
    unbuildable(run_dir)
    assert replay([str(run_dir), "--t", "9"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("runners.agent.replay: meta.json's config does not build here: ")
    assert "not_on_this_path" in err


def test_the_replay_refuses_to_rebuild_a_prompt_from_data_that_changed_since_the_run(tmp_path, capsys):
    data = tmp_path / "facts.txt"
    data.write_text("the facts the run read")
    target = f"env._target_={__name__}.FileDrift"
    run_dir = tiny_stream(tmp_path, "env=custom", target, f"+env.data_file={data}", "memory=tepa_rev")
    rewrite_log(run_dir, without_samples)  # an older log: only a replay could show its prompt
    assert replay([str(run_dir), "--t", "9"]) == 0
    assert "(rebuilt by replay)" in capsys.readouterr().out  # the same data: rebuilt
    data.write_text("facts edited since")
    assert replay([str(run_dir), "--t", "9"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "the data files changed since the run (fingerprint " in err


def test_a_damaged_log_or_an_unwritable_out_is_one_line(tmp_path, capsys):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert main([str(run_dir), "--timeline", "--out", str(blocker / "t.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {blocker / 't.png'}: not a writable directory" in err
    data = bytearray((run_dir / EPISODES).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run_dir / EPISODES).write_bytes(bytes(data))
    assert main([str(run_dir), "--t", "9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "episodes.parquet: sha256 differs" in err


def test_the_inspector_and_the_timeline_read_any_memorys_events(tmp_path, capsys):
    target = "memory._target_=tests.helpers.event_memory.DistrustOnFailure"
    run_dir = tiny_stream(tmp_path, "memory=custom", target)
    events = [json.loads(line) for line in (run_dir / "archive.jsonl").read_text().splitlines()]
    revoked = next(e for e in events if e["event"] == "revoked")
    assert main([str(run_dir), "--t", str(revoked["t"] + 1), "--key", revoked["key"], "--timeline"]) == 0
    text = capsys.readouterr().out
    assert "keeps no precedents" not in text and "logged no lifecycle events" not in text
    assert f"    t={revoked['t']} revoked: {revoked['reason']} -> revoked" in text
    assert f"#{revoked['id']} {revoked['value']!r}: revoked before t (since t={revoked['t']}" in text
    written = run_dir / f"timeline_key={revoked['key']}.png"  # beside the logs, named by the key
    assert f"wrote {written}" in text and written.read_bytes().startswith(b"\x89PNG")


def test_the_timeline_is_titled_by_the_runs_labels_not_its_path(tmp_path):
    run_dir = tiny_stream(tmp_path, "memory=tepa_rev")
    meta = json.loads((run_dir / META).read_text())
    events = read_lifecycle(run_dir)
    figure_path = timeline(run_dir, meta, events, None, None, tmp_path / "t.png")
    assert figure_path == tmp_path / "t.png" and figure_path.read_bytes().startswith(b"\x89PNG")
    assert timeline_title(meta, busiest_key(events)).startswith(
        "adhoc / controlled_drift / tepa_rev / seed 1:"
    )
    assert str(tmp_path) not in timeline_title(meta, "0")
