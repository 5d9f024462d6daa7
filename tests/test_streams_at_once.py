"""`streams_at_once`: a run's seeds a few at a time; it changes when streams run, never what they log
or where, and a bad value is one line naming the key."""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
import pytest

import runners.run as run_module
from runners.config import ConfigError
from tests.helpers.runner import run_overrides


def logs(results) -> dict[str, list]:
    return {
        str(p.parent.relative_to(results)): pq.read_table(p, columns=["action", "success"]).to_pylist()
        for p in sorted(results.rglob("episodes.parquet"))
    }


def test_streams_run_one_at_a_time_log_what_they_log_all_at_once(tmp_path):
    together, apart = tmp_path / "together", tmp_path / "apart"
    common = ("seeds=[0,1,2]", "max_episodes=30", "progress=false", "memory=tepa_rev")
    run_overrides(*common, f"results_dir={together}")
    run_overrides(*common, f"results_dir={apart}", "streams_at_once=1")
    assert logs(together) == logs(apart) and len(logs(apart)) == 3


def test_at_most_that_many_streams_are_running_at_any_moment(compose, monkeypatch, tmp_path):
    running, most = 0, 0
    real = run_module._stream

    async def counted(*args, **kwargs):
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.01)
            return await real(*args, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(run_module, "_stream", counted)
    spec = compose("seeds=[0,1,2,3]", "streams_at_once=2", "max_episodes=5", f"results_dir={tmp_path}")
    asyncio.run(run_module.run_spec(spec))
    assert most == 2


def test_a_limit_below_one_is_refused_naming_the_key(compose):
    with pytest.raises(ConfigError, match=r"^streams_at_once=0: must be >= 1"):
        compose("streams_at_once=0")
    assert compose().streams_at_once is None
