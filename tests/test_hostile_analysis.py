"""The analysis on odd logs and options: a null `success` was counted as a failure, a NaN or repeated
`t` crashed after the tables were written, `--reference nonexistent` and `--tolerance nan` showed
every method "0/2 recovered", an unwritable `--out` gave a traceback. Each is now one line naming the
file or option, exit code 2, and nothing written."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from analysis.__main__ import main
from tests.test_analysis_outputs import write_run


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for memory in ("no_memory", "tepa_rev"):
        for seed in (0, 1):
            write_run(root, "exp", "controlled_drift", memory, seed)
    return root


def analyse(runs, out, *options: str, caplog) -> tuple[int, str]:
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="analysis"):
        code = main(["--runs", str(runs), "--out", str(out), "--quiet", *options])
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) <= 1 and all("\n" not in e for e in errors)
    return code, errors[0] if errors else ""


def _edit(runs, change) -> str:
    path = next(runs.rglob("episodes.parquet"))
    frame = pd.read_parquet(path)
    change(frame)
    frame.to_parquet(path)
    return str(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.__setitem__("success", f["success"].astype(object).where(f.index != 3, None)),
         "column success has 1 null value(s)"),
        (lambda f: f.__setitem__("t", f["t"].astype(float).where(f.index != 3, float("nan"))),
         "column t must hold integers, found double"),
        (lambda f: f.__setitem__("t", f["t"].where(f.index != 3, 2)), "column t repeats 1 step(s)"),
        (lambda f: f.__setitem__("seed", f["seed"].astype(str)), "column seed must hold integers"),
        (lambda f: f.__setitem__("phase", f["phase"].where(f.index != 0, None)), "column phase has 1 null"),
    ],
    ids=["null success", "NaN t", "repeated t", "text seed", "null phase"],
)  # fmt: skip
def test_an_odd_log_is_one_line_naming_the_file_and_nothing_is_written(
    runs, tmp_path, caplog, change, message
):
    path = _edit(runs, change)
    out = tmp_path / "out"
    code, error = analyse(runs, out, caplog=caplog)
    assert code == 2 and path in error and message in error
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--reference", "nonexistent"), "--reference nonexistent: no such method in the runs"),
        (("--tolerance", "nan"), "--tolerance nan: must be a finite number >= 0"),
        (("--tolerance", "inf"), "--tolerance inf: must be a finite number >= 0"),
        (("--window", "0"), "--window 0: must be an integer >= 1"),
    ],
)
def test_a_bad_option_is_one_line_naming_it_and_nothing_is_written(runs, tmp_path, caplog, options, message):
    out = tmp_path / "out"
    code, error = analyse(runs, out, *options, caplog=caplog)
    assert code == 2 and error.startswith(f"analysis: {message}")
    assert not out.exists() or list(out.iterdir()) == []


def test_an_unwritable_out_is_one_line(runs, tmp_path, caplog):
    (tmp_path / "file").write_text("not a folder")
    code, error = analyse(runs, tmp_path / "file" / "out", caplog=caplog)
    assert code == 2 and "--out" in error and "not a writable directory" in error


def test_a_present_reference_still_analyses(runs, tmp_path, caplog):
    code, error = analyse(runs, tmp_path / "out", "--reference", "tepa_rev", caplog=caplog)
    assert (code, error) == (0, "") and (tmp_path / "out" / "README.md").is_file()
