"""The paper's phenomena on executable_drift (real tools on real files), default sizes, 2 seeds.

Measured (2 seeds): full reversal No Memory ~0.31, Append-Only ~0.21, TEPA-Rev ~0.91; Oracle Reset ~0.95.
"""

import pytest

from envs.executable_drift.env import ExecutableDrift
from tests.helpers.phenomena import early_success, run_methods, success


@pytest.fixture(scope="module")
def runs():
    return run_methods(ExecutableDrift, range(2))


def test_append_only_is_polluted_and_tepa_recovers_in_full_reversal(runs):
    df, _ = runs
    s = success(df, "full_reversal")
    assert s["append_only"] < s["no_memory"] - 0.05
    assert s["tepa_rev"] >= 0.88
    assert s["tepa_rev"] > s["lww"] + 0.2


def test_oracle_reset_adapts_fastest(runs):
    df, _ = runs
    with ExecutableDrift() as env:
        env.reset(0)
        boundaries = [t for t, _ in env.phase_boundaries]
    early = early_success(df, boundaries, window=100)
    assert early["oracle_reset"] >= early.drop("oracle_reset").max()


def test_tepa_repromotes_in_the_return_phase(runs):
    df, events = runs
    rep = events[(events.memory == "tepa_rev") & (events.event == "repromoted") & (events.t >= 1200)]
    assert rep.seed.nunique() == 2
