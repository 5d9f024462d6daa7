"""`max_episodes`: a quick try stops every stream after that many episodes, and a truncated stream is its
own stream: its own directory and identity, never skipped for, resumed into or replaced by the full one."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import EPISODES, PARTIAL_EPISODES
from runners.config import ConfigError
from runners.store.identity import stream_identity
from tests.helpers.runner import run_overrides
from tests.test_resume import FLAKY, FlakyDrift

TRUNCATED = "max_episodes=5"


def rows(summary) -> list[int]:
    return [pq.read_metadata(s.directory / EPISODES).num_rows for s in summary.streams]


def test_max_episodes_stops_every_stream_and_names_its_directory(tmp_path):
    summary = run_overrides(f"results_dir={tmp_path}", TRUNCATED, "seeds=[0,1]", "memory=tepa_full")
    assert rows(summary) == [5, 5]
    assert all(s.directory.parent.name == TRUNCATED for s in summary.streams)


def test_a_truncated_stream_and_the_full_stream_never_skip_or_replace_each_other(tmp_path):
    args = (f"results_dir={tmp_path}", "env.phase_length=5", "memory=lww")
    short = run_overrides(*args, TRUNCATED)
    [path] = [s.directory / EPISODES for s in short.streams]
    before = path.read_bytes()
    full = run_overrides(*args)
    assert [s.skipped for s in full.streams] == [False] and rows(full) == [20]
    assert full.streams[0].directory.parent.name == "env.phase_length=5"
    again = run_overrides(*args, TRUNCATED)
    assert [s.skipped for s in again.streams] == [True] and path.read_bytes() == before
    assert [s.skipped for s in run_overrides(*args).streams] == [True]
    assert not [p for p in tmp_path.rglob("*") if ".other-config" in p.name or ".corrupt" in p.name]


def test_a_full_stream_never_resumes_from_an_interrupted_truncated_one(tmp_path, monkeypatch):
    monkeypatch.setattr(FlakyDrift, "fail_at", 3)
    with pytest.raises(RuntimeError, match="interrupted at t=3"):
        run_overrides(f"results_dir={tmp_path}", *FLAKY, "max_episodes=8")
    [partial] = tmp_path.rglob(PARTIAL_EPISODES)
    monkeypatch.setattr(FlakyDrift, "fail_at", None)
    full = run_overrides(f"results_dir={tmp_path}", *FLAKY)
    assert [(s.replayed, s.episodes_run) for s in full.streams] == [(0, 24)]
    assert partial.is_file()  # still there for its own configuration
    resumed = run_overrides(f"results_dir={tmp_path}", *FLAKY, "max_episodes=8")
    assert [(s.replayed, s.episodes_run) for s in resumed.streams] == [(3, 5)] and rows(resumed) == [8]


def test_max_episodes_is_part_of_the_identity_only_when_set(compose):
    full, short = compose(), compose(TRUNCATED)
    assert "max_episodes" not in stream_identity(full, 0, None, None)  # existing runs keep their identity
    assert stream_identity(short, 0, None, None) == {
        **stream_identity(full, 0, None, None),
        "max_episodes": 5,
    }
    assert short.max_episodes == 5 and full.max_episodes is None


@pytest.mark.parametrize("value", ["0", "-3"])
def test_max_episodes_below_one_stops_the_run_naming_the_key(compose, value):
    with pytest.raises(ConfigError, match=rf"^max_episodes={value}: must be >= 1"):
        compose(f"max_episodes={value}")
