"""The run inspector rebuilds the prompt a run sent, exactly, by replaying the stream's log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pyarrow.parquet as pq
import pytest

from analysis.inspect import main
from runners.agent.replay import replay_decision
from runners.llm.backend import Reply, Request
from runners.llm.simulated.reader import SimulatedBackend
from runners.run import PROJECT_ROOT
from tests.helpers.runner import run_overrides


class RecordingBackend(SimulatedBackend):
    """The simulated reader, keeping every request it was sent (class-wide: the runner builds it)."""

    sent: ClassVar[list[Request]] = []

    async def complete(self, request: Request) -> Reply:
        RecordingBackend.sent.append(request)
        return await super().complete(request)


def run_recorded(results: Path, env: str, memory: str) -> tuple[Path, list[Request]]:
    RecordingBackend.sent = []
    overrides = [
        f"results_dir={results}",
        f"env={env}",
        "env.phase_length=8",
        f"memory={memory}",
        "seed=3",
        f"llm._target_={__name__}.RecordingBackend",
    ]
    summary = run_overrides(*overrides)
    return summary.streams[0].directory, list(RecordingBackend.sent)


@pytest.mark.parametrize(
    ("env", "memory"), [("executable_drift", "tepa_rev"), ("controlled_drift", "append_only")]
)
def test_the_inspector_rebuilds_every_prompt_the_run_sent(tmp_path, env, memory):
    run_dir, sent = run_recorded(tmp_path, env, memory)
    steps = pq.read_table(run_dir / "episodes.parquet", columns=["t"]).column("t").to_pylist()
    assert len(sent) == len(steps) == 32
    for t, request in zip(steps, sent, strict=True):
        decision = replay_decision(run_dir, t)
        assert decision.prompts == [request.messages]


def test_the_inspector_prints_prompt_reply_outcome_and_precedents(tmp_path, capsys):
    run_dir, sent = run_recorded(tmp_path, "controlled_drift", "tepa_rev")
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
    code = (
        "import sys; from analysis.inspect import main; "
        f"assert main([{str(run_dir)!r}, '--timeline', '--out', {str(tmp_path / 't.png')!r}]) == 0; "
        "harness = {'envs', 'runners', 'tepa', 'baselines'}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in harness); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


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
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "![paper_controlled (env.phase_length=30) / controlled_drift: precedents of key" in readme
    assert "(figures/lifecycle_paper_controlled.png)" in readme
    assert (
        (tmp_path / "out" / "figures" / "lifecycle_paper_controlled.png").read_bytes().startswith(b"\x89PNG")
    )
