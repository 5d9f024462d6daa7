"""The analysis reads the episodes in its drawing processes while its own threads parse the archives:
the logs must be the ones read on threads, and a fault must be named as before (a run whose files do
not verify first, whichever archive is also damaged)."""

from pathlib import Path

import pandas as pd
import pytest

import analysis.__main__ as cli
from analysis.data.load import load_runs
from tests.test_analysis_outputs import reseal, runs_root, write_run  # noqa: F401  (runs_root: the fixture)


def test_logs_read_in_the_drawing_processes_are_the_logs_read_on_threads(runs_root):  # noqa: F811
    here = load_runs(runs_root)
    with cli.drawing_process(cli.DRAWERS) as drawing:
        there = load_runs(runs_root, readers=drawing)
    for name in ("episodes", "events", "runs"):
        pd.testing.assert_frame_equal(getattr(there, name), getattr(here, name), check_exact=True)


def _damaged_archive_then_a_run(root: Path) -> Path:
    """Two runs: the first (in sorted order) with an archive that is not JSON but matches its checksums,
    then a sound one, which is returned."""
    first = write_run(root, "exp", "controlled_drift", "append_only", 0)
    (first / "archive.jsonl").write_text("not json\n")
    reseal(first)
    return write_run(root, "exp", "controlled_drift", "lww", 0)


@pytest.mark.parametrize("in_processes", [False, True], ids=["on threads", "in the drawing processes"])
def test_a_run_whose_files_do_not_verify_is_named_before_a_damaged_archive(tmp_path, in_processes):
    unverified = _damaged_archive_then_a_run(tmp_path)
    with (unverified / "episodes.parquet").open("ab") as episodes:
        episodes.write(b"x")
    with cli.drawing_process(cli.DRAWERS) as drawing, pytest.raises(ValueError) as refused:
        load_runs(tmp_path, readers=drawing if in_processes else None)
    assert str(unverified / "episodes.parquet") in str(refused.value)
    assert "bytes, meta.json records" in str(refused.value)


def test_a_damaged_archive_is_named_once_every_run_verifies(tmp_path):
    _damaged_archive_then_a_run(tmp_path)
    with cli.drawing_process(cli.DRAWERS) as drawing, pytest.raises(ValueError) as refused:
        load_runs(tmp_path, readers=drawing)
    assert "unreadable" in str(refused.value)
    assert "append_only/seed=0/archive.jsonl" in str(refused.value)
