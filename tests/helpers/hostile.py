"""Helpers of the hostile-input tests (tests/test_hostile_*.py): the runner from the command line and
in process, and a search for a secret in every file a run leaves (Parquet decoded, the rest as bytes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from tests.helpers.runner import run_overrides

SENTINEL = "sk-test-SENTINEL-0123456789abcdef"
TINY = ("max_episodes=8",)  # every stream stops after 8 episodes


def run(results: Path, *overrides: str):
    """The runner in process (validate, build, run every stream) on a tiny controlled-drift stream."""
    return run_overrides(f"results_dir={results}", *TINY, *overrides)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The run's error, asserting it failed with one line and no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    boilerplate = ("Error executing job with overrides", "Set the environment variable HYDRA_FULL_ERROR")
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(boilerplate)]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def files_containing(root: Path, secret: str) -> list[Path]:
    """Every file under `root` whose content holds `secret` (Parquet files decoded: they compress)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            text = str(pq.read_table(path).to_pylist())
            hit = secret in text
        else:
            hit = secret.encode() in path.read_bytes()
        if hit:
            found.append(path)
    return found
