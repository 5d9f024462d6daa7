"""The calibration procedure's logic (runners/llm/calibrate.py) on tiny streams: targets and loss, grid
selection, run deduplication, the identification claims the procedure rests on, and the reports."""

import json

import pytest

from runners.llm import calibrate as cal
from runners.llm.calibrate import Grid, Stream

TINY = {
    "controlled_drift": {"phase_length": 12},
    "executable_drift": {"phase_length": 4},
    "preference_stream": {"stable_length": 10, "drift_length": 30},
}
ENVS = ("controlled_drift", "executable_drift", "preference_stream")


@pytest.fixture(scope="module")
def defaults():
    return cal.load_defaults(ENVS, ("no_memory", "oracle_reset", "append_only"))


def _rates(defaults, env, memory, reader, seed=0):
    return cal.run_one(defaults.stream(env, memory, seed, env_params=TINY[env], reader=reader))


def test_defaults_are_the_configured_ones(defaults):
    assert defaults.reader["lapse"] == 0.05 and defaults.reader["half_life"] == 1000.0
    assert cal.default_point(defaults) == {"lapse": 0.05, "n_actions": 3, "hint_rate": 0.875}
    assert defaults.memory["oracle_reset"] == {"top_k": 8}


def test_targets_come_from_the_paper_numbers():
    assert [s.target for s in cal.SETTINGS] == [0.309, 0.298, 0.837]


def test_loss_is_zero_on_target_and_counts_each_miss():
    point = {"lapse": 0.05, "n_actions": 3, "hint_rate": 0.8}
    exact = {
        "controlled_drift/no_memory": 0.309,
        "executable_drift/no_memory": 0.298,
        "preference_stream/no_memory": 0.837,
        "controlled_drift/oracle_reset": cal.ceiling(0.05, 3),
        "executable_drift/oracle_reset": cal.ceiling(0.05, 3),
        "preference_stream/oracle_reset": 0.1,  # not scored
    }
    assert sum(cal.loss_terms(point, exact).values()) == pytest.approx(0.0)
    terms = cal.loss_terms({**point, "lapse": 0.15}, {**exact, "controlled_drift/no_memory": 0.409})
    assert terms["controlled_drift/no_memory"] == pytest.approx(0.01)
    assert terms["prior/lapse"] == pytest.approx(0.01)
    # The ceiling moved with lapse: Oracle Reset at the old ceiling now overshoots it.
    assert terms["controlled_drift/oracle_reset"] == pytest.approx(
        (cal.ceiling(0.05, 3) - cal.ceiling(0.15, 3)) ** 2
    )
    assert "preference_stream/oracle_reset" not in terms


@pytest.mark.parametrize(
    ("field", "value"), [("lapse", ()), ("lapse", (1.5,)), ("n_actions", (1,)), ("hint_rate", (True,))]
)
def test_grid_rejects_bad_axes_naming_them(field, value):
    with pytest.raises(ValueError, match=f"grid.{field}"):
        Grid(**{field: value})


def test_grid_always_contains_the_defaults():
    grid = Grid(lapse=(0.1,), n_actions=(4,), hint_rate=(0.9,)).including(
        {"lapse": 0.05, "n_actions": 3, "hint_rate": 0.8}
    )
    assert grid == Grid(lapse=(0.05, 0.1), n_actions=(3, 4), hint_rate=(0.8, 0.9))
    assert len(grid.points()) == 8


def _fake_run(stream: Stream) -> dict[str, float]:
    """A reader model in closed form: No Memory guesses 1/A in the drift settings, follows a hint
    (success 1 - lapse) in the preference stream; Oracle Reset reaches the ceiling."""
    env, reader = dict(stream.env_params), dict(stream.reader)
    lapse = reader["lapse"]
    if stream.env == "preference_stream":
        h = env["hint_rate"]
        rate = h * (1 - lapse) + (1 - h) / 3 if stream.memory == "no_memory" else 0.5
    else:
        a = env["n_actions"]
        rate = 1 / a if stream.memory == "no_memory" else cal.ceiling(lapse, a)
    return {"full_reversal": rate, cal.OVERALL: rate}


def test_selects_the_grid_point_closest_to_the_targets(defaults, monkeypatch):
    calls = []
    monkeypatch.setattr(cal, "run_one", lambda s: calls.append(s) or _fake_run(s))
    grid = Grid(lapse=(0.0, 0.05, 0.1), n_actions=(2, 3, 4), hint_rate=(0.7, 0.82, 0.9))
    result = cal.calibrate(grid, seeds=(0, 1), workers=1, env_overrides={}, defaults=defaults)
    # 1/3 is nearest 0.309 and 0.298; on the lapse/hint ridge the prior keeps lapse at 0.05, where
    # h * 0.95 + (1 - h) / 3 = 0.837 needs h = 0.817.
    assert {k: result.winner[k] for k in ("lapse", "n_actions", "hint_rate")} == {
        "lapse": 0.05,
        "n_actions": 3,
        "hint_rate": 0.82,
    }
    assert result.winner["loss"] == min(r["loss"] for r in result.rows)
    assert result.defaults["hint_rate"] == 0.875 and len(result.rows) == 3 * 3 * 4  # the default added
    # Each setting runs only over its own knobs: drift 3 lapses x 3 A, preference 3 lapses x 4 hint
    # rates, two methods and two seeds each; nothing twice.
    assert len(calls) == len(set(calls)) == (9 + 9 + 12) * 2 * 2


def test_no_memory_in_drift_is_blind_to_lapse(defaults):
    """Why the drift targets cannot place lapse (the reason for the prior)."""
    for env in ("controlled_drift", "executable_drift"):
        assert _rates(defaults, env, "no_memory", {"lapse": 0.0}) == _rates(
            defaults, env, "no_memory", {"lapse": 0.3}
        )


def test_oracle_reset_in_drift_is_blind_to_the_a_priori_parameters(defaults):
    """Why the weights and the half-life are set a priori: the calibration runs do not respond to them."""
    base = _rates(defaults, "controlled_drift", "oracle_reset", {})
    for moved in ({"w_failure": 0.3}, {"w_hint": 9.0}, {"half_life": 5.0}, {"w_support": 4.0}):
        assert _rates(defaults, "controlled_drift", "oracle_reset", moved) == base
    assert _rates(defaults, "controlled_drift", "oracle_reset", {"lapse": 0.5}) != base


def test_scaling_all_weights_changes_no_choice(defaults):
    """w_support only fixes the unit, even where evidence conflicts (Append-Only after a reversal)."""
    for env in ("controlled_drift", "preference_stream"):
        base = _rates(defaults, env, "append_only", {})
        assert (
            _rates(defaults, env, "append_only", {"w_support": 2.0, "w_failure": 2.0, "w_hint": 6.0}) == base
        )


def test_calibration_end_to_end_writes_its_reports(defaults, tmp_path):
    grid = Grid(lapse=(0.0,), n_actions=(3,), hint_rate=(0.9,))
    result = cal.calibrate(grid, seeds=(0,), workers=1, env_overrides=TINY, defaults=defaults)
    assert len(result.rows) == 4  # the defaults' lapse and hint rate were added
    cal.write_calibration(result, tmp_path)
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["winner"] == result.winner and saved["env_overrides"] == TINY
    text = (tmp_path / "calibration.md").read_text()
    assert "## Selected point vs the configured defaults" in text and "0.309 (paper)" in text
    assert "<- defaults" in cal.grid_text(result)


def test_workers_give_the_same_results_as_one_process(defaults):
    streams = [
        defaults.stream("controlled_drift", "no_memory", s, env_params=TINY["controlled_drift"])
        for s in (0, 1)
    ]
    assert cal.run_all(streams, workers=2) == cal.run_all(streams, workers=1)
    with pytest.raises(ValueError, match="workers"):
        cal.run_all(streams, workers=0)


def test_sensitivity_moves_one_parameter_at_a_time(defaults, tmp_path):
    moves = {"w_failure": (1.0, 2.0)}  # 1.0 is the default: measured once, as "defaults"
    result = cal.sensitivity(
        moves,
        methods=("no_memory", "append_only"),
        seeds=(0,),
        workers=1,
        env_overrides=TINY,
        defaults=defaults,
    )
    assert [r["variant"] for r in result.rows][::4] == ["defaults", "w_failure=2"]
    names = {c["conclusion"] for c in result.conclusions}
    assert names == {
        "controlled_drift: append_only < no_memory",
        "preference_stream: append_only < no_memory",
    }
    for c in result.conclusions:
        assert c["holds"] == (c["margin"] > 0)
    nm = [
        r["success"] for r in result.rows if r["method"] == "no_memory" and r["setting"] == "controlled_drift"
    ]
    assert nm[0] == nm[1]  # No Memory sees no memory lines, so the failure weight cannot matter
    cal.write_sensitivity(result, tmp_path)
    assert "| paper | 0.309 | 0.210 |" in (tmp_path / "sensitivity.md").read_text()
    with pytest.raises(ValueError, match="'nope' is not a reader parameter"):
        cal.variants(defaults, {"nope": (1.0,)})


def test_bad_seeds_and_workers_are_refused(defaults):
    with pytest.raises(ValueError, match="seeds"):
        cal.calibrate(seeds=(), defaults=defaults)
    with pytest.raises(ValueError, match="workers"):
        cal.sensitivity(workers=0, defaults=defaults)
    with pytest.raises(SystemExit):
        cal.main(["--seeds", "0"])
