"""The inspector reads, and the replay rebuilds, only a stream whose logs are as the run wrote them: a
meta.json that is not a complete stream's (once a TypeError traceback) or an episodes.parquet changed
after the run (once replayed as if it were the run's) is one line naming the file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.inspect import main as inspect
from analysis.streamlog.stream import EPISODES, META
from runners.agent.replay import main as replay
from tests.helpers.runner import run_overrides


@pytest.fixture
def stream(tmp_path):
    summary = run_overrides(f"results_dir={tmp_path}", "env.phase_length=5", "memory=lww", "progress=false")
    return summary.streams[0].directory


def _one_line_error(capsys, main, *args) -> str:
    assert main([*args]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error


@pytest.mark.parametrize("main", [inspect, replay])
@pytest.mark.parametrize("meta", [[], {"complete": True}, {"config": [], "complete": True}, "x"])
def test_a_meta_json_that_is_not_a_complete_streams_is_one_line(stream, capsys, meta, main):
    (stream / META).write_text(json.dumps(meta))
    error = _one_line_error(capsys, main, str(stream), "--t", "3")
    assert f"{stream / META}: " in error  # named, whichever check refuses it first


@pytest.mark.parametrize("main", [inspect, replay])
def test_an_episode_log_changed_after_the_run_is_one_line_naming_it(stream, capsys, main):
    table = pq.read_table(stream / EPISODES)
    replies = table.column("reply").to_pylist()
    replies[2] = "Answer: Z"
    table = table.set_column(table.schema.get_field_index("reply"), "reply", pa.array(replies))
    pq.write_table(table, stream / EPISODES)
    error = _one_line_error(capsys, main, str(stream), "--t", "3")
    assert str(stream / EPISODES) in error
