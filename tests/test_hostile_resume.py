"""Resume logs damaged by hand in ways that once left a stream stuck on every rerun: JSON nested 100k deep
in a line or in the header (RecursionError), a token count beyond int64 (OverflowError at the parquet
write), the partial log's path being a folder; and replayed numbers that reached the final parquet
unchecked (negative tokens, inf / NaN latency). Each is now kept aside with one line, the valid prefix
replays, and the stream finishes equal to an uninterrupted run."""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import ARCHIVE, EPISODES, PARTIAL_EPISODES
from envs.controlled_drift import ControlledDrift
from tests.helpers.runner import run_overrides

DEEP = b"[" * 100_000 + b"]" * 100_000


class BreakingDrift(ControlledDrift):
    """Controlled drift that breaks at step `fail_at` (a class attribute): a stream that stops at a known
    episode and leaves its partial log."""

    fail_at: int | None = None

    def execute(self, task, action):
        if task.t == self.fail_at:
            raise RuntimeError(f"broken at t={task.t}")
        return super().execute(task, action)


BREAKING = ("env=custom", f"env._target_={__name__}.BreakingDrift", "+env.phase_length=5", "memory=tepa_rev")


def _run(results):
    return run_overrides(f"results_dir={results}", "progress=false", *BREAKING)


def _with(**fields):
    return lambda line: json.dumps({**json.loads(line), **fields}).encode()


DAMAGE = {  # what becomes of the 7th logged episode (line 8)
    "100k-deep nesting": lambda line: DEEP,
    "100k-deep nesting in a field": lambda line: line[:-1] + b',"deep":' + DEEP + b"}",
    "prompt_tokens = 2**70": _with(prompt_tokens=2**70),
    "negative prompt_tokens": _with(prompt_tokens=-5),
    "negative completion_tokens": _with(completion_tokens=-1),
    "NaN latency": lambda line: line[:-1] + b',"latency":NaN}',
    "infinite latency": lambda line: line[:-1] + b',"latency":Infinity}',
    "negative latency": _with(latency=-0.5),
    "a bool for an int": _with(n_evidence=True),
    "a number for a text": _with(phase=3),
}


@pytest.fixture
def interrupted(tmp_path, monkeypatch):
    """A stream stopped at t=12 (12 episodes logged), and the path of its partial log."""
    monkeypatch.setattr(BreakingDrift, "fail_at", 12)
    with pytest.raises(RuntimeError, match="broken at t=12"):
        _run(tmp_path / "a")
    monkeypatch.setattr(BreakingDrift, "fail_at", None)
    [partial] = (tmp_path / "a").glob(f"runs/**/{PARTIAL_EPISODES}")
    return partial


def _finishes_as_uninterrupted(tmp_path, partial, caplog, replayed: int) -> None:
    with caplog.at_level(logging.WARNING):
        resumed = _run(tmp_path / "a")
    assert [(s.replayed, s.episodes_run) for s in resumed.streams] == [(replayed, 20 - replayed)]
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith(str(partial))]
    assert "kept as" in line and "\n" not in line
    assert len(list(partial.parent.glob(f"{PARTIAL_EPISODES}.damaged-*"))) == 1
    reference = _run(tmp_path / "b").streams[0].directory
    assert (partial.parent / EPISODES).read_bytes() == (reference / EPISODES).read_bytes()
    assert (partial.parent / ARCHIVE).read_bytes() == (reference / ARCHIVE).read_bytes()


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_line_is_kept_aside_and_its_prefix_replays(tmp_path, interrupted, caplog, damage):
    lines = interrupted.read_bytes().split(b"\n")
    lines[7] = DAMAGE[damage](lines[7])
    interrupted.write_bytes(b"\n".join(lines))
    _finishes_as_uninterrupted(tmp_path, interrupted, caplog, replayed=6)


def test_a_header_nested_100k_deep_is_kept_aside_and_the_stream_starts_afresh(tmp_path, interrupted, caplog):
    lines = interrupted.read_bytes().split(b"\n")
    interrupted.write_bytes(b"\n".join([DEEP, *lines[1:]]))
    _finishes_as_uninterrupted(tmp_path, interrupted, caplog, replayed=0)


def test_a_folder_where_the_partial_log_belongs_is_kept_aside(tmp_path, interrupted, caplog):
    interrupted.unlink()
    interrupted.mkdir()
    (interrupted / "inside").write_text("kept")
    _finishes_as_uninterrupted(tmp_path, interrupted, caplog, replayed=0)
    [aside] = interrupted.parent.glob(f"{PARTIAL_EPISODES}.damaged-*")
    assert (aside / "inside").read_text() == "kept"


def test_a_folder_beside_a_complete_stream_is_kept_aside_and_the_stream_skipped(tmp_path, caplog):
    [stream] = [s.directory for s in _run(tmp_path).streams]
    (stream / PARTIAL_EPISODES).mkdir()
    with caplog.at_level(logging.WARNING):
        assert [s.skipped for s in _run(tmp_path).streams] == [True]
    assert len(list(stream.glob(f"{PARTIAL_EPISODES}.damaged-*"))) == 1
    assert pq.read_table(stream / EPISODES).num_rows == 20
