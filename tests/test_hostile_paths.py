"""Paths that once ended in a traceback after the start-up checks, or wrote outside `results_dir`: a sweep
`name=choice(ok,../../x)` (Hydra's job files landed two levels up), a 300-character name or label, a file
where `results/hydra` or the stream's folder belongs, a full disk and a read-only stream folder. Each is
now one line naming the folder, and nothing logged before is lost."""

from __future__ import annotations

import errno
import os

import pytest

from analysis.streamlog import atomic
from analysis.streamlog import stream as runlog
from analysis.streamlog.stream import EPISODES, LogUnwritable
from tests.helpers.hostile import TINY, one_line_error, run
from tests.helpers.runner import cli

LONG = "n" * 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-m", "name=choice(ok,../../x)"), "name='../../x': must be a plain directory name"),
        (("-m", "name=choice(ok,'a/b')"), "name='a/b': must be a plain directory name"),
        ((f"name={LONG}",), "name=nnnnnnnnnn"),
        ((f"+memory.label={LONG}",), "memory.label=nnnnnnnnnn"),
    ],
)
def test_a_name_that_would_leave_the_results_tree_or_is_too_long_is_one_line(tmp_path, args, message):
    results = tmp_path / "a" / "b" / "results"
    results.mkdir(parents=True)
    proc = cli(results, *args, f"results_dir={results}", *TINY)
    error = one_line_error(proc)
    assert message in error
    assert "must be at most 128 characters, got 300" in error or "plain directory name" in error
    outside = [p for p in tmp_path.rglob("*") if p != results and results not in p.parents]
    assert sorted(outside) == [tmp_path / "a", tmp_path / "a" / "b"]
    assert not (results / "runs").exists()


def test_a_name_of_128_characters_is_accepted(tmp_path):
    [stream] = run(tmp_path, "name=" + "n" * 128).streams
    assert stream.directory.parts[-5] == "n" * 128


def test_a_file_where_results_hydra_belongs_is_one_line(tmp_path):
    (tmp_path / "hydra").write_text("in the way")
    proc = cli(tmp_path, f"results_dir={tmp_path}", *TINY)
    assert f"{tmp_path / 'hydra'}: not a writable directory" in one_line_error(proc)


def test_a_file_where_the_stream_folder_belongs_is_one_line(tmp_path):
    (tmp_path / "runs").write_text("in the way")
    proc = cli(tmp_path, f"results_dir={tmp_path}", *TINY)
    assert "/seed=0: cannot write the stream's logs (Not a directory)" in one_line_error(proc)


def _failing(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


def test_a_disk_that_fills_mid_stream_stops_with_one_line_and_the_rerun_resumes(tmp_path, monkeypatch):
    real_open, writes = open, []

    class FillingFile:
        """The partial log on a disk that is full after its first batch."""

        def __init__(self, f):
            self._f = f

        def write(self, text):
            writes.append(text)
            if len(writes) > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self._f.write(text)

        def __getattr__(self, name):
            return getattr(self._f, name)

    def filling_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FillingFile(f) if mode == "a" else f

    monkeypatch.setattr(runlog, "open", filling_open, raising=False)
    monkeypatch.setattr(runlog, "FLUSH_EVERY", 3)
    monkeypatch.setattr(runlog, "FLUSH_EVERY_S", 1e9)
    with pytest.raises(LogUnwritable) as error:
        run(tmp_path, "memory=lww")
    message = str(error.value)
    assert (
        "seed=0: cannot write the stream's logs (No space left on device)" in message and "\n" not in message
    )
    monkeypatch.undo()
    [stream] = run(tmp_path, "memory=lww").streams
    assert (stream.replayed, stream.episodes_run) == (3, 5)  # the batch written before the disk filled
    reference = run(tmp_path / "reference", "memory=lww").streams[0].directory
    assert (stream.directory / EPISODES).read_bytes() == (reference / EPISODES).read_bytes()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_final_write_that_fails_is_one_line_and_the_rerun_finishes(tmp_path, monkeypatch, code):
    monkeypatch.setattr(runlog.os, "fsync", _failing(code))
    with pytest.raises(
        LogUnwritable, match=rf"seed=0: cannot write the stream's logs \({os.strerror(code)}\)"
    ):
        run(tmp_path, "memory=lww")
    monkeypatch.undo()
    [stream] = run(tmp_path, "memory=lww").streams
    assert (stream.replayed, stream.episodes_run) == (8, 0)
    assert (stream.directory / EPISODES).is_file()


def test_a_read_only_stream_folder_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic.tempfile, "mkstemp", _failing(errno.EROFS))
    with pytest.raises(
        LogUnwritable, match=r"seed=0: cannot write the stream's logs \(Read-only file system\)"
    ):
        run(tmp_path, "memory=lww")
