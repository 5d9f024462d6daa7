"""The analysis on odd logs and options: a null `success` was counted as a failure, a NaN or repeated
`t` crashed after the tables were written, `--reference nonexistent` and `--tolerance nan` showed
every method "0/2 recovered", an unwritable `--out` gave a traceback. Each is now one line naming the
file or option, exit code 2, and nothing written."""

from __future__ import annotations

import json
import logging
import os
import time

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.streamlog.stream import MAX_DEPTH, read_meta, verify
from tests.helpers.report_pages import all_text
from tests.test_analysis_outputs import reseal, write_run


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
    reseal(path.parent)
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


def test_a_run_that_records_no_checksums_is_not_trusted(runs, tmp_path, caplog):
    path = _edit(runs, lambda f: f.__setitem__("success", True))  # a tampered success column
    meta = path.replace("episodes.parquet", "meta.json")
    recorded = json.loads(open(meta).read())
    del recorded["files"]
    open(meta, "w").write(json.dumps(recorded))
    code, error = analyse(runs, tmp_path / "out", caplog=caplog)
    expected = f"analysis: {meta}: records no checksums of episodes.parquet, archive.jsonl; rerun its"
    assert code == 2 and error == f"{expected} experiment to redo it"


def test_a_complete_stream_without_its_episodes_is_one_line_not_a_silent_skip(runs, tmp_path, caplog):
    path = next(runs.rglob("episodes.parquet"))
    path.unlink()
    code, error = analyse(runs, tmp_path / "out", caplog=caplog)
    assert code == 2 and error == f"analysis: {path}: missing; rerun its experiment to redo it"


@pytest.mark.parametrize("column", ["memory", "experiment"])
def test_a_label_that_is_not_a_plain_name_is_refused(runs, tmp_path, caplog, column):
    _edit(runs, lambda f: f.__setitem__(column, "x\n\n<img src=y onerror=z>"))
    code, error = analyse(runs, tmp_path / "out", caplog=caplog)
    assert code == 2 and f"column {column} holds 'x\\n\\n<img" in error and "not a plain name" in error


def test_a_phase_name_with_line_breaks_and_html_stays_inert_text(runs, tmp_path, caplog):
    for path in runs.rglob("episodes.parquet"):
        frame = pd.read_parquet(path)
        frame["phase"] = frame["phase"].replace("stable", "stable\n\n# Injected <script>alert(1)</script>")
        frame.to_parquet(path)
        reseal(path.parent)
    out = tmp_path / "out"
    code, error = analyse(runs, out, caplog=caplog)
    assert (code, error) == (0, "")
    readme = all_text(out)  # README.md and the experiment pages
    assert "\n# Injected" not in readme and "<script>" not in readme
    assert "stable # Injected &lt;script>alert(1)&lt;/script>" in readme
    table = (out / "tables" / "success_exp.md").read_text()
    assert all(line.startswith(("|", "###", "Mean")) or not line for line in table.splitlines())


def test_a_missing_backend_note_is_one_line_and_nothing_is_written(runs, tmp_path, caplog):
    out = tmp_path / "out"
    code, error = analyse(runs, out, "--backend-note", str(tmp_path / "missing.md"), caplog=caplog)
    assert code == 2 and error.startswith(f"analysis: --backend-note {tmp_path / 'missing.md'}: unreadable")
    assert not out.exists() or list(out.iterdir()) == []


def test_a_deeply_nested_meta_json_is_one_line_for_the_analysis_and_unreadable_for_the_runner(
    runs, tmp_path, caplog
):
    meta = next(runs.rglob("meta.json"))
    meta.write_text("[" * 100_000 + "]" * 100_000)
    code, error = analyse(runs, tmp_path / "out", caplog=caplog)
    assert (
        code == 2
        and error
        == f"analysis: {meta}: nested deeper than {MAX_DEPTH} levels; rerun its experiment to redo it"
    )
    assert read_meta(meta.parent) is None  # the runner moves such a stream aside (analysis.streamlog.stream)
    meta.write_text(
        json.dumps(
            {
                "complete": True,
                "a": [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                []
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ],
            }
        )
    )
    assert read_meta(meta.parent) is None


def test_a_fifo_in_place_of_meta_json_or_a_log_never_blocks(runs, tmp_path, caplog):
    meta = next(runs.rglob("meta.json"))
    meta.unlink()
    os.mkfifo(meta)
    started = time.monotonic()
    code, error = analyse(runs, tmp_path / "out", caplog=caplog)
    assert code == 2 and error.startswith(f"analysis: {meta}: unreadable (not a regular file)")
    assert read_meta(meta.parent) is None and time.monotonic() - started < 30
    meta.unlink()
    write_run(tmp_path / "fresh", "exp", "controlled_drift", "lww", 0)
    archive = next((tmp_path / "fresh").rglob("archive.jsonl"))
    archive.unlink()
    os.mkfifo(archive)
    problem = verify(archive.parent, json.loads((archive.parent / "meta.json").read_text()))
    assert problem == f"{archive}: unreadable (not a regular file)"


@pytest.mark.parametrize("spoil", ["nested", "fifo"])
def test_the_runner_moves_a_stream_with_an_unreadable_meta_json_aside_without_waiting(tmp_path, spoil):
    from analysis.streamlog.stream import StreamLog

    log = StreamLog(tmp_path / "s", {"seed": 0})
    log.open([])
    log.finish([{"t": 0}], [], {"seed": 0})
    meta = log.dir / "meta.json"
    meta.unlink()
    if spoil == "fifo":
        os.mkfifo(meta)
    else:
        meta.write_text("[" * 100_000 + "]" * 100_000)
    assert not log.is_complete()
    assert not log.dir.exists() and [p.name.split("-")[0] for p in tmp_path.iterdir()] == ["s.corrupt"]
