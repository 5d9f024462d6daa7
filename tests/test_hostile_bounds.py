"""Config values without an upper bound that once crashed or hung a run after it started: reader weights
of 1e308 (scores overflowed to NaN: ZeroDivisionError near episode 418, on every rerun) and 10^12 keys
(memory exhausted after 75 s). Each is now one line naming the key, before the first episode, and the
largest accepted value runs."""

from __future__ import annotations

import time

import pytest

from envs.base import MAX_KEYS
from runners.config import ConfigError
from tests.helpers.hostile import run
from tests.helpers.runner import run_overrides


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("llm.w_support=1e308", "llm.w_support=1e+308: must be in [0, 1e+06]"),
        ("llm.w_failure=1e7", "llm.w_failure=10000000.0: must be in [0, 1e+06]"),
        ("llm.w_hint=1e308", "llm.w_hint=1e+308: must be in [0, 1e+06]"),
    ],
)
def test_a_reader_weight_too_large_to_sum_stops_the_run_before_the_first_episode(tmp_path, override, message):
    with pytest.raises(ConfigError) as error:
        run(tmp_path, override)
    assert str(error.value).startswith(message)
    assert not (tmp_path / "runs").exists()


def test_the_largest_reader_weights_run_a_whole_stream(tmp_path):
    summary = run_overrides(
        f"results_dir={tmp_path}", "progress=false", "memory=append_only", "env.phase_length=150",
        "llm.w_support=1e6", "llm.w_failure=1e6", "llm.w_hint=1e6", "llm.half_life=1e-300",
    )  # fmt: skip
    assert summary.streams[0].episodes_run == 600


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (("env.n_keys=1000000000000",), "env.n_keys"),
        (("env=executable_drift", "env.n_keys=1000000000000"), "env.n_keys"),
        (("env=preference_stream", "env.n_users=1000000000000"), "env.n_users"),
    ],
)
def test_more_keys_than_an_environment_holds_stop_the_run_at_once(tmp_path, overrides, key):
    start = time.monotonic()
    with pytest.raises(ConfigError) as error:
        run(tmp_path, *overrides)
    assert str(error.value).startswith(f"{key}=1000000000000: must be in [")
    assert f", {MAX_KEYS}]" in str(error.value) and time.monotonic() - start < 30
    assert not (tmp_path / "runs").exists()
