"""The analysis' outputs against a hostile folder: `--replace` removed a user's own files and dropped
other experiments without a word, a kill while manifest.json was written left it empty, one
hand-edited number in manifest.json changed a published table unnoticed, malformed manifest entries
gave tracebacks, `--out` replaced a FIFO or a device, and Ctrl-C printed a traceback."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import analysis.__main__ as analysis_main
from analysis.__main__ import main
from analysis.report import manifest
from analysis.view.__main__ import main as view_main
from tests.test_analysis_outputs import write_run

ROOT = Path(__file__).resolve().parents[1]


def _paper_runs(root, seeds=range(3)):
    for memory in ("no_memory", "tepa_rev"):
        for seed in seeds:
            write_run(root, "paper_controlled", "controlled_drift", memory, seed)


def _own_runs(root, seeds=range(3)):
    for memory in ("no_memory", "lww"):
        for seed in seeds:
            write_run(root, "own", "controlled_drift", memory, seed)


def _analyse(runs, out, *options, caplog) -> tuple[int, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="analysis"):
        code = main(["--runs", str(runs), "--out", str(out), "--quiet", *options])
    lines = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert all("\n" not in line for line in lines)
    return code, lines


@pytest.fixture(scope="module")
def kept_template(tmp_path_factory) -> Path:
    """The runs and an --out holding paper_controlled's results, then `own`'s analysed into it (paper
    kept): analysed once per module, since the two analyses cost most of each test that starts here."""
    root = tmp_path_factory.mktemp("kept")
    _paper_runs(root / "paper")
    _own_runs(root / "own")
    for runs in ("paper", "own"):
        assert main(["--runs", str(root / runs), "--out", str(root / "out"), "--quiet"]) == 0
    return root


@pytest.fixture
def kept_folder(kept_template, tmp_path):
    """The test's own copy of `kept_template` (paper, own, out), to edit as it likes."""
    shutil.copytree(kept_template, tmp_path, dirs_exist_ok=True)
    return tmp_path / "paper", tmp_path / "own", tmp_path / "out"


def _edit_manifest(out, change) -> None:
    path = out / manifest.MANIFEST
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1) + "\n")


# ------------------------------------------------------------------------------------------- M-1


def test_replace_removes_only_the_files_a_manifest_lists_and_names_every_experiment_it_drops(
    kept_folder, caplog
):
    paper, own, out = kept_folder
    (out / "tables" / "my_notes.md").write_text("mine\n")
    (out / "figures" / "my_plot.png").write_bytes(b"mine")
    assert (out / "tables" / "success_paper_controlled.md").is_file()
    code, lines = _analyse(own, out, "--replace", caplog=caplog)
    assert code == 0
    assert lines == [
        f"analysis: --replace drops the results in {out} of paper_controlled (no runs of them under {own})"
    ]
    assert (out / "tables" / "my_notes.md").read_text() == "mine\n"
    assert (out / "figures" / "my_plot.png").read_bytes() == b"mine"
    assert not (out / "tables" / "success_paper_controlled.md").exists()
    assert not list((out / "figures").glob("*paper_controlled*"))
    assert set(json.loads((out / "manifest.json").read_text())["experiments"]) == {"own"}


def test_replace_over_a_folder_without_a_manifest_removes_nothing_it_did_not_write(tmp_path, caplog):
    own, out = tmp_path / "own", tmp_path / "out"
    _own_runs(own)
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "old_table.csv").write_text("a\n1\n")
    assert _analyse(own, out, "--replace", caplog=caplog)[0] == 0
    assert (out / "tables" / "old_table.csv").read_text() == "a\n1\n"


# ------------------------------------------------------------------------------------------- M-2


def test_every_analysis_output_is_written_to_a_temporary_file_and_renamed_into_place(
    tmp_path, caplog, monkeypatch
):
    """No output is truncated in place (a kill in between left an empty manifest.json): each one is
    written whole beside it and renamed over it."""
    paper, out = tmp_path / "paper", tmp_path / "out"
    _paper_runs(paper)
    in_place = []

    def refuse(name):
        original = getattr(pathlib.Path, name)

        def write(self, *args, **kwargs):
            if out in self.parents:
                in_place.append(self.name)
            return original(self, *args, **kwargs)

        return write

    for name in ("write_text", "write_bytes"):
        monkeypatch.setattr(pathlib.Path, name, refuse(name))
    original_to_csv = pd.DataFrame.to_csv

    def to_csv(self, path_or_buf=None, *args, **kwargs):
        if path_or_buf is not None:
            in_place.append(str(path_or_buf))
        return original_to_csv(self, path_or_buf, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    replaced = []
    original_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append(Path(b).name), original_replace(a, b)))
    assert _analyse(paper, out, caplog=caplog)[0] == 0
    assert in_place == []
    assert {"manifest.json", "README.md", "scorecard.md", "scorecard.csv", "scorecard.tex"} <= set(replaced)
    shared = [out / "README.md", out / "manifest.json", out / "tables" / "scorecard.md"]
    shared += list((out / "figures").glob("*.png"))
    assert {p.stat().st_mode & 0o777 for p in shared} == {0o644}  # readable by all, as before
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_kill_while_the_manifest_is_written_leaves_the_previous_one_whole(kept_folder, caplog, monkeypatch):
    """Ctrl-C arrives while the new manifest.json is being written (before it reaches the disk)."""
    from analysis.streamlog import atomic

    paper, own, out = kept_folder
    before = (out / "manifest.json").read_bytes()
    write_run(own, "own", "controlled_drift", "lww", 7)  # a manifest that differs from the last one
    original_fsync = atomic.os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".manifest.json."):
            raise KeyboardInterrupt
        return original_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    assert main(["--runs", str(own), "--out", str(out), "--quiet"]) == 130
    assert (out / "manifest.json").read_bytes() == before
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------------------------- M-3


def test_every_manifest_entry_records_the_digest_of_its_canonical_json(kept_folder):
    paper, own, out = kept_folder
    entries = json.loads((out / "manifest.json").read_text())["experiments"]
    assert set(entries) == {"own", "paper_controlled"}
    for entry in entries.values():
        assert entry["sha256"] == manifest.digest(entry) and len(entry["sha256"]) == 64


def test_a_hand_edited_kept_number_is_one_line_naming_the_experiment_and_is_not_published(
    kept_folder, caplog
):
    paper, own, out = kept_folder

    def edit(data):
        frame = data["experiments"]["paper_controlled"]["frames"]["success"]
        mean = frame["columns"].index("mean")
        frame["rows"][0][mean] = 0.999

    _edit_manifest(out, edit)
    code, lines = _analyse(own, out, caplog=caplog)
    assert code == 0
    assert lines == [
        f"analysis: {out / 'manifest.json'}: the entry of paper_controlled does not match its digest "
        "(edited by hand?); its results are not kept"
    ]
    assert not (out / "tables" / "success_paper_controlled.csv").exists()
    assert "0.999" not in (out / "README.md").read_text()
    assert set(json.loads((out / "manifest.json").read_text())["experiments"]) == {"own"}


def test_an_entry_without_a_digest_is_accepted_once_with_a_warning_and_gets_one_when_written(
    kept_folder, caplog
):
    paper, own, out = kept_folder
    table = (out / "tables" / "success_paper_controlled.csv").read_bytes()
    _edit_manifest(out, lambda data: [e.pop("sha256") for e in data["experiments"].values()])
    code, lines = _analyse(own, out, caplog=caplog)
    assert code == 0
    assert lines[0] == (
        f"analysis: {out / 'manifest.json'}: no digest for own, paper_controlled (written before "
        "digests); accepted unverified, the next analysis into this folder adds them"
    )
    assert (out / "tables" / "success_paper_controlled.csv").read_bytes() == table
    entries = json.loads((out / "manifest.json").read_text())["experiments"]
    assert all(e["sha256"] == manifest.digest(e) for e in entries.values())
    assert not [line for line in _analyse(own, out, caplog=caplog)[1] if "no digest for" in line]


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda f: f["rows"][0].append(1.0), id="a row one value too long"),
        pytest.param(lambda f: f["rows"].__setitem__(0, f["rows"][0][:-1]), id="a row one value short"),
        pytest.param(lambda f: f["rows"].__setitem__(0, "text"), id="a row that is text"),
        pytest.param(lambda f: f["rows"][0].__setitem__(0, {"a": 1}), id="a value that is an object"),
        pytest.param(lambda f: f["columns"].__setitem__(0, 3), id="a column name that is a number"),
    ],
)
def test_a_malformed_kept_entry_is_one_line_naming_it_and_is_not_used(kept_folder, caplog, spoil):
    paper, own, out = kept_folder

    def edit(data):
        entry = data["experiments"]["paper_controlled"]
        spoil(entry["frames"]["success"])
        entry.pop("sha256")  # no digest to catch it: the shape check must

    _edit_manifest(out, edit)
    code, lines = _analyse(own, out, caplog=caplog)
    assert code == 0
    assert (
        f"analysis: {out / 'manifest.json'}: the entry of paper_controlled is malformed; its results are "
        "not kept" in lines
    )
    assert not (out / "tables" / "success_paper_controlled.csv").exists()


# ------------------------------------------------------------------------------------------- M-8


def test_view_out_naming_a_fifo_is_one_line_and_the_fifo_stays(tmp_path, capsys):
    write_run(tmp_path / "runs", "own", "controlled_drift", "lww", 0)
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    assert view_main([str(tmp_path / "runs"), "--out", str(fifo)]) == 2
    err = capsys.readouterr().err
    kind = "not a regular file (a device, a FIFO, a socket)"
    assert (
        err
        == f"analysis.view: --out {fifo}: exists and is {kind}; name a file (it is replaced) or a new path\n"
    )
    assert fifo.is_fifo()


def test_view_out_naming_a_folder_is_one_line_and_leaves_nothing_behind(tmp_path, capsys):
    write_run(tmp_path / "runs", "own", "controlled_drift", "lww", 0)
    folder = tmp_path / "pages"
    folder.mkdir()
    assert view_main([str(tmp_path / "runs"), "--out", str(folder)]) == 2
    assert capsys.readouterr().err.startswith(f"analysis.view: --out {folder}: exists and is a folder;")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pages", "runs"]
    assert list(folder.iterdir()) == []


def test_view_out_naming_a_regular_file_replaces_it_readable_by_all(tmp_path, capsys):
    write_run(tmp_path / "runs", "own", "controlled_drift", "lww", 0)
    page = tmp_path / "page.html"
    page.write_text("old")
    assert view_main([str(tmp_path / "runs"), "--out", str(page)]) == 0
    assert page.read_text().startswith("<!") and page.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("option", ["--out", "--markdown"])
def test_bench_out_naming_a_fifo_is_one_line_before_anything_is_measured(tmp_path, option):
    fifo = tmp_path / "bench.x"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "runners.bench", "--quick", option, str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"runners.bench: {option} {fifo}: exists and is not a regular file (a device, a FIFO, a socket); "
        "name a file (it is replaced) or a new path"
    ]
    assert fifo.is_fifo()


def test_analysis_out_naming_a_fifo_is_one_line(tmp_path, caplog):
    _own_runs(tmp_path / "own")
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert main(["--runs", str(tmp_path / "own"), "--out", str(fifo), "--quiet"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert error.startswith(f"analysis: --out {fifo}: not a writable directory") and fifo.is_fifo()


# ------------------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_during_the_analysis_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    _own_runs(tmp_path / "own")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis_main, "analyse", interrupted)
    assert main(["--runs", str(tmp_path / "own"), "--out", str(tmp_path / "out"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("analysis: interrupted") and "Traceback" not in err


def test_inspect_timeline_out_naming_a_fifo_is_one_line_and_the_fifo_stays(tmp_path, capsys):
    from analysis.inspect import main as inspect_main
    from tests.test_inspect import run_recorded

    run_dir, _ = run_recorded(tmp_path, "controlled_drift", "tepa_rev")
    fifo = tmp_path / "t.png"
    os.mkfifo(fifo)
    assert inspect_main([str(run_dir), "--timeline", "--out", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {fifo}: exists and is not a regular file" in err
    assert fifo.is_fifo()


@pytest.mark.parametrize("name", ["README.md", "manifest.json", "tables"])
def test_an_output_inside_out_of_the_wrong_kind_is_one_line_and_nothing_is_written(tmp_path, caplog, name):
    _own_runs(tmp_path / "own")
    out = tmp_path / "out"
    out.mkdir()
    if name == "tables":
        os.mkfifo(out / name)
    else:
        (out / name).mkdir()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="analysis"):
        assert main(["--runs", str(tmp_path / "own"), "--out", str(out), "--quiet"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.name == "analysis"]
    assert error.startswith(f"analysis: --out {out}") and str(out / name) in error
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_a_manifest_listing_files_that_are_not_names_is_not_a_traceback(kept_folder, caplog):
    paper, own, out = kept_folder
    _edit_manifest(out, lambda data: data.update(tables=[["x"], {"y": 1}, 3], figures={"a": 1}))
    assert _analyse(own, out, caplog=caplog)[0] == 0
    assert _analyse(own, out, "--replace", caplog=caplog)[0] == 0
