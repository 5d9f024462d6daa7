"""`python -m runners.llm.choices`: what a choice copied from its prompt, and replaying logged streams to
recover the prompts."""

import subprocess
import sys

import pandas as pd

from envs.base import Task
from runners.agent.prompt import render
from runners.llm.choices import describe, main
from runners.run import PROJECT_ROOT
from tepa.evidence import Evidence


def prompt(*lines: tuple[str, bool], options=("red", "blue", "green")) -> str:
    task = Task(key=0, text="Job 0.", phase="stable", t=9, options=options)
    evidence = [Evidence(0, value, holds, t) for t, (value, holds) in enumerate(lines)]
    return render(task, evidence)[-1]["content"]


def test_a_choice_is_compared_with_the_latest_valid_the_leading_value_a_failed_one_and_the_first_option():
    shown = prompt(("red", True), ("red", True), ("blue", True), ("red", False))
    assert describe(shown, "red") == {
        "lines": 4, "latest_valid": False, "most_frequent": True, "failed": True, "first_option": True,
    }  # fmt: skip
    assert describe(shown, "blue") == {
        "lines": 4, "latest_valid": True, "most_frequent": False, "failed": False, "first_option": False,
    }  # fmt: skip
    tied = prompt(("red", True), ("blue", True))
    assert describe(tied, "blue")["most_frequent"] is None  # no value leads
    assert describe(prompt(), "red") == {
        "lines": 0, "latest_valid": None, "most_frequent": None, "failed": None, "first_option": True,
    }  # fmt: skip


def test_the_streams_are_replayed_and_the_rates_written(tmp_path):
    run = [
        sys.executable, "-m", "runners.run", "-m", "memory=no_memory,append_only", "seeds=[0,1]",
        "env=controlled_drift_words", "env.phase_length=6", f"results_dir={tmp_path}", "progress=false",
    ]  # fmt: skip
    subprocess.run(run, check=True, capture_output=True, cwd=PROJECT_ROOT, timeout=300)
    (tmp_path / "README.md").write_text("# Results\n")
    assert (
        main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path), "--order", "no_memory,append_only"])
        == 0
    )
    table = pd.read_csv(tmp_path / "tables" / "choices.csv")
    assert list(table["memory"].unique()) == ["no_memory", "append_only"]
    assert table.groupby("memory")["decisions"].sum().to_dict() == {"no_memory": 48, "append_only": 48}
    assert (table.loc[table["memory"] == "no_memory", "bin"] == "0").all()
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# Results\n") and "## What the choices follow, by memory size" in readme


def test_no_complete_run_is_one_line_and_exit_code_2(tmp_path, capsys):
    assert main(["--runs", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"runners.llm.choices: runs: no complete run under {tmp_path}"
