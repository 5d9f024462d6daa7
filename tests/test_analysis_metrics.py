"""analysis.metrics on small frames with hand-computed answers."""

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from analysis.metrics.compute import (
    OVERALL,
    adaptation,
    mpi,
    paired_tests,
    phase_orders,
    recovery_lag,
    run_costs,
    success_per_seed,
    summarize_adaptation,
    summarize_success,
    sweep_method,
    swept_parameters,
)
from analysis.metrics.display import env_label, sorted_methods
from analysis.stats import holm

SETTING = ("exp", "env")


def per_seed_frame(values: dict[str, list[float]], phase: str = "full_reversal") -> pd.DataFrame:
    """Per-seed success rates: {method: [seed 0, seed 1, ...]}."""
    rows = [
        {"run": f"{m}/{s}", "experiment": "exp", "env": "env", "memory": m, "seed": s, "phase": phase}
        | {"success": v, "n_episodes": 100}
        for m, vs in values.items()
        for s, v in enumerate(vs)
    ]
    return pd.DataFrame(rows)


def episodes_frame(runs: dict[tuple[str, int], dict[str, list[int]]]) -> pd.DataFrame:
    """Episodes from {(method, seed): {phase: [success, ...]}} with t counting up across phases."""
    rows = []
    for (method, seed), phases in runs.items():
        t = 0
        for phase, outcomes in phases.items():
            for outcome in outcomes:
                rows.append(
                    {"run": f"{method}/{seed}", "experiment": "exp", "env": "env", "memory": method}
                    | {"seed": seed, "t": t, "phase": phase, "success": bool(outcome)}
                    | {"prompt_tokens": 10 * t, "trials": 0, "trial_passes": 0}
                )
                t += 1
    return pd.DataFrame(rows)


def test_mpi_is_the_ratio_of_seed_matched_means():
    # The paper's arithmetic: (0.309 - 0.210) / 0.309 = 0.320.
    frame = per_seed_frame(
        {
            "no_memory": [0.30, 0.31, 0.317, 0.9],
            "append_only": [0.20, 0.21, 0.22],
            "tepa_rev": [0.95, 0.94, 0.96],
        }
    )
    result = mpi(frame, {SETTING: ["full_reversal"]})
    row = result[(result["memory"] == "append_only") & (result["phase"] == "full_reversal")].iloc[0]
    # Seed 3 exists only for No Memory and must be ignored (seed matching).
    assert row["s_ref"] == pytest.approx(0.309) and row["s_method"] == pytest.approx(0.21)
    assert row["mean"] == pytest.approx((0.309 - 0.21) / 0.309) and row["n"] == 3
    tepa = result[(result["memory"] == "tepa_rev") & (result["phase"] == "full_reversal")].iloc[0]
    assert tepa["mean"] < 0  # better than no memory
    assert "no_memory" not in set(result["memory"])


def test_mpi_interval_is_the_paired_bootstrap_of_the_ratio():
    ref = np.array([0.30, 0.33, 0.28, 0.31, 0.29, 0.32, 0.30, 0.27])
    other = np.array([0.20, 0.24, 0.19, 0.20, 0.22, 0.21, 0.18, 0.23])
    frame = per_seed_frame({"no_memory": list(ref), "lww": list(other)})
    row = mpi(frame, {SETTING: ["full_reversal"]}).iloc[0]

    def ratio(a, b, axis=-1):
        return (a.mean(axis=axis) - b.mean(axis=axis)) / a.mean(axis=axis)

    ci = scipy.stats.bootstrap(
        (ref, other), ratio, paired=True, vectorized=True, rng=np.random.default_rng(0)
    ).confidence_interval
    assert (row["low"], row["high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_mpi_without_no_memory_runs_is_empty_and_zero_reference_is_nan():
    assert mpi(per_seed_frame({"lww": [0.2, 0.3]}), {SETTING: ["full_reversal"]}).empty
    row = mpi(
        per_seed_frame({"no_memory": [0.0, 0.0], "lww": [0.2, 0.3]}), {SETTING: ["full_reversal"]}
    ).iloc[0]
    assert math.isnan(row["mean"])


def test_phase_order_and_success_per_seed():
    # Phase names in reverse alphabetical order of their appearance: order must follow t, not names.
    episodes = episodes_frame({("lww", 0): {"zeta": [1, 1, 0, 0], "alpha": [1, 0]}})
    assert phase_orders(episodes) == {SETTING: ["zeta", "alpha"]}
    per_seed = success_per_seed(episodes).set_index("phase")
    assert per_seed.loc["zeta", "success"] == 0.5 and per_seed.loc["zeta", "n_episodes"] == 4
    assert per_seed.loc["alpha", "success"] == 0.5
    assert (
        per_seed.loc[OVERALL, "success"] == pytest.approx(3 / 6) and per_seed.loc[OVERALL, "n_episodes"] == 6
    )


def test_recovery_lag_on_a_known_series():
    series = [0] * 30 + [1] * 50
    # Windows of 20 reach 18/20 = 0.9 = 1 - 0.1 first when they start at episode 28 (zeros at 28, 29).
    assert recovery_lag(series, 1.0, window=20, tolerance=0.1) == 28
    assert recovery_lag(series, 1.0, window=20, tolerance=0.0) == 30
    assert recovery_lag([1] * 40, 0.8, window=20, tolerance=0.1) == 0
    assert math.isnan(recovery_lag([0] * 40, 0.8, window=20, tolerance=0.1))
    assert recovery_lag([0, 1, 1], 1.0, window=20, tolerance=0.4) == 0  # short phase: one window of 3
    assert math.isnan(recovery_lag([], 1.0, window=5, tolerance=0.1))
    with pytest.raises(ValueError, match="window"):
        recovery_lag(series, 1.0, window=0, tolerance=0.1)
    with pytest.raises(ValueError, match="tolerance"):
        recovery_lag(series, 1.0, window=5, tolerance=-0.1)


def test_adaptation_against_own_level_and_against_oracle_reset():
    stable = [0] * 10 + [1] * 20  # last 20 of the stable phase: level 1.0
    runs = {
        ("oracle_reset", 0): {"stable": stable, "reversal": [0] * 5 + [1] * 40},
        ("tepa_rev", 0): {"stable": stable, "reversal": [0] * 12 + [1] * 33},
        ("append_only", 0): {"stable": stable, "reversal": [0, 1] * 22 + [0]},
        ("no_memory", 0): {"stable": [0, 0, 1] * 10, "reversal": [0, 0, 1] * 15},
    }
    episodes = episodes_frame(runs)
    phases = phase_orders(episodes)
    lags = adaptation(episodes, phases, window=20, tolerance=0.1)
    own = lags.set_index("memory")
    # Level 1.0, tolerance 0.1: the first window of 20 with at most 2 failures starts 2 before the last 0.
    assert own.loc["oracle_reset", "lag"] == 3 and own.loc["tepa_rev", "lag"] == 10
    assert math.isnan(own.loc["append_only", "lag"])  # alternating 0/1 never reaches 0.9
    assert own.loc["no_memory", "lag"] == 0  # its own stable level is 1/3: nothing to recover
    assert own.loc["tepa_rev", "boundary_t"] == 30 and own.loc["tepa_rev", "phase"] == "reversal"
    common = adaptation(episodes, phases, window=20, tolerance=0.1, reference="oracle_reset").set_index(
        "memory"
    )
    assert math.isnan(common.loc["no_memory", "lag"])  # never reaches Oracle Reset's level
    summary = summarize_adaptation(lags, phases).set_index("memory")
    assert summary.loc["tepa_rev", "diff_mean"] == 7  # 10 - 3, paired on seed 0
    assert summary.loc["append_only", "n_recovered"] == 0 and summary.loc["append_only", "n_runs"] == 1


def test_paired_tests_apply_holm_within_a_setting_and_phase():
    frame = per_seed_frame(
        {
            "tepa_rev": [0.95, 0.94, 0.96, 0.93, 0.95, 0.97],
            "append_only": [0.21, 0.20, 0.22, 0.19, 0.23, 0.20],
            "lww": [0.94, 0.95, 0.95, 0.94, 0.96, 0.96],
            "oracle_reset": [0.96, 0.95, 0.95, 0.95, 0.96, 0.96],
        }
    )
    result = paired_tests(frame, {SETTING: ["full_reversal"]})
    at = result[result["phase"] == "full_reversal"].set_index("other")
    assert list(at.index) == ["append_only", "lww", "oracle_reset"]  # method order, focus excluded
    assert at.loc["append_only", "p"] == pytest.approx(2 / 64)
    assert at.loc["append_only", "diff"] == pytest.approx(0.95 - 1.25 / 6)
    assert list(at["p_holm"]) == pytest.approx(list(holm(at["p"].to_numpy())))


def test_run_costs_from_archive_and_counters():
    episodes = episodes_frame({("tepa_full", 0): {"stable": [1, 1, 1, 1]}, ("lww", 0): {"stable": [1, 0]}})
    episodes.loc[episodes["memory"] == "tepa_full", "trials"] = [0, 5, 5, 10]
    counts = {"created": 1, "promoted": 2, "revoked": 1, "repromoted": 1, "trial": 1}
    events = pd.DataFrame([{"run": "tepa_full/0", "event": e, "count": n} for e, n in counts.items()])
    costs = run_costs(episodes, events).set_index("memory")
    assert costs.loc["tepa_full", ["promotions", "revocations", "repromotions", "trials"]].tolist() == [
        2,
        1,
        1,
        10,
    ]
    assert costs.loc["tepa_full", "trials_per_promotion"] == pytest.approx(10 / 3)
    assert costs.loc["tepa_full", "prompt_tokens"] == pytest.approx(15.0)  # mean of 0, 10, 20, 30
    assert costs.loc["lww", "promotions"] == 0 and math.isnan(costs.loc["lww", "trials_per_promotion"])


def test_swept_parameters_are_varying_numeric_memory_keys():
    runs = pd.DataFrame(
        {
            "config": [
                {
                    "config.memory.theta_rev": 0.3,
                    "config.memory.theta_rec": 0.5,
                    "config.memory.n_min": 3,
                    "seed": 0,
                },
                {
                    "config.memory.theta_rev": 0.4,
                    "config.memory.theta_rec": 0.6,
                    "config.memory.n_min": 3,
                    "seed": 1,
                },
                {
                    "config.memory.theta_rev": 0.4,
                    "config.memory.theta_rec": 0.5,
                    "config.memory.name": "x",
                    "seed": 2,
                },
            ]
        }
    )
    assert swept_parameters(runs) == ["config.memory.theta_rec", "config.memory.theta_rev"]


def test_labels_and_orders():
    assert (
        env_label("memoryagentbench_sh_262k") == "SH-262k"
        and env_label("controlled_drift") == "controlled_drift"
    )
    assert sorted_methods(["mine", "tepa_rev", "no_memory", "lww"]) == [
        "no_memory",
        "lww",
        "tepa_rev",
        "mine",
    ]


def test_sweep_method_comes_from_the_memory_class():
    label = "tepa_rev-theta_rev=0.4-theta_rec=0.5"
    assert sweep_method({"config.memory._target_": "tepa.tepa_rev.TEPARev"}, label) == "tepa_rev"
    assert sweep_method({"config.memory._target_": "mine.memory:Mine"}, "mine-x=1") == "mine-x=1"
    assert sweep_method({}, label) == label


def test_two_seeds_give_the_exact_p_but_withhold_the_bootstrap_p_its_interval_and_d_z():
    two = per_seed_frame({"tepa_rev": [0.95, 0.97], "append_only": [0.21, 0.20]})
    row = paired_tests(two, {SETTING: ["full_reversal"]}).iloc[0]
    assert row["p"] == pytest.approx(0.5)  # 2 / 2^2: the exact test is honest at any n
    assert all(math.isnan(row[c]) for c in ("p_boot", "p_boot_holm", "d_z", "diff_low", "diff_high"))
    success = summarize_success(two, {SETTING: ["full_reversal"]})
    assert success["low"].isna().all() and success["high"].isna().all()
    eight = per_seed_frame(
        {"tepa_rev": [0.95, 0.97, 0.94, 0.96, 0.95, 0.93, 0.97, 0.96], "append_only": [0.21, 0.20] * 4}
    )
    row = paired_tests(eight, {SETTING: ["full_reversal"]}).iloc[0]
    assert 0 < row["p_boot"] < 0.01 and math.isfinite(row["d_z"]) and row["diff_low"] < row["diff_high"]
