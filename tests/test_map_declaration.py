"""The robustness map's declaration and jobs (runners.map): the grid, the tuning grids, the seed split,
and bad input as one line naming the key before any episode runs."""

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.map.runs import choose, point_params
from runners.config import ConfigError
from runners.map import evaluation_jobs, load_map, tuning_jobs
from runners.map.__main__ import main
from runners.registry import swept_memories

TINY_GRID = {"reactive": {"c": [1, 2]}}


def declaration(tmp_path: Path, tune: dict, tuning_seeds=(1000, 1001)) -> Path:
    path = tmp_path / "tiny_map.yaml"
    body = {"experiment": "robustness_map", "tuning_seeds": list(tuning_seeds), "tune": tune}
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return path


def test_the_map_is_at_least_5_by_5_contains_the_papers_point_and_every_built_in_method():
    spec = load_map()
    assert list(spec.axes) == ["env.noise", "env.reversal_rate"]
    assert all(len(values) >= 5 for values in spec.axes.values())
    assert {"env.noise": 0.0, "env.reversal_rate": 0.0} in spec.cells()
    assert spec.methods == tuple(swept_memories("paper_controlled"))
    assert len(spec.eval_seeds) >= 10
    assert not set(spec.eval_seeds) & set(spec.tuning_seeds)
    assert set(spec.tune) >= {"sliding_window", "reactive", "tepa_rev", "tepa_full"}


def test_no_evaluation_seed_is_ever_used_for_tuning():
    spec = load_map()
    tune = tuning_jobs(spec)
    assert tune and all(job.seeds == spec.tuning_seeds for job in tune)
    # every method runs on the tuning seeds (the best simple baseline is picked there); an untuned one
    # at its defaults only, a tuned one at its grid points (here its defaults are one of them)
    assert {job.method for job in tune} == set(spec.methods)
    untuned = [job for job in tune if job.method not in spec.tune]
    assert untuned and all(job.params == {} and job.name.endswith("-defaults") for job in untuned)
    assert len(tune) == len(spec.cells()) * (
        sum(len(spec.points(m)) for m in spec.tune) + len(set(spec.methods) - set(spec.tune))
    )
    chosen = {(c, m): spec.points(m)[-1] for c in range(len(spec.cells())) for m in spec.tune}
    evaluate = evaluation_jobs(spec, chosen)
    assert all(job.seeds == spec.eval_seeds for job in evaluate if job.max_evidence is None)
    # under the evidence budget on the tuning seeds too, to pick the best baseline there
    assert all(
        job.seeds == spec.tuning_seeds + spec.eval_seeds for job in evaluate if job.max_evidence is not None
    )
    differ = [
        m for m in spec.tune if any(spec.memory_defaults[m][k] != v for k, v in spec.points(m)[-1].items())
    ]
    budget = [job for job in evaluate if job.max_evidence is not None]
    assert spec.evidence_budget and {job.max_evidence for job in budget} == {spec.evidence_budget}
    assert len(budget) == len(spec.cells()) * len(spec.methods)  # every method under the same budget
    assert len(evaluate) - len(budget) == len(spec.cells()) * (
        len(spec.methods) + len(differ)
    )  # defaults, tuned
    # the choice reads tuning seeds only: evaluation-seed runs that favour another point change nothing
    sj = spec.to_json()
    points = spec.points("reactive")
    first, last = points[0], points[-1]
    scores = [0.5 + 0.01 * i for i in range(len(points))]  # the last point is best on the tuning seeds
    rows = [
        {"method": "reactive", "cell": 0, "seed": s, "params": point_params(sj, "reactive", p), "success": v}
        for p, v in zip(points, scores, strict=True)
        for s in spec.tuning_seeds
    ]
    rows += [
        {
            "method": "reactive",
            "cell": 0,
            "seed": s,
            "params": point_params(sj, "reactive", first),
            "success": 1.0,
        }
        for s in spec.eval_seeds
    ]
    sj = {
        **sj,
        "axes": {"env.noise": [0.0]},
        "methods": ["reactive"],
        "tune": {"reactive": sj["tune"]["reactive"]},
    }
    assert choose(pd.DataFrame(rows), sj) == {(0, "reactive"): last}


def test_a_chosen_point_equal_to_the_defaults_is_one_job_besides_the_budgets():
    spec = load_map()
    defaults = {"c": spec.memory_defaults["reactive"]["c"]}
    jobs = evaluation_jobs(spec, {(0, "reactive"): defaults})
    names = [j.name for j in jobs if j.method == "reactive" and j.name.startswith("eval-c0-")]
    assert names == ["eval-c0-reactive-defaults", "eval-c0-reactive-budget"]  # no separate tuned job


@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ({"lww": {"window": [1, 2]}}, r"^tune.lww.window: not a parameter of lww \(it takes: top_k\)$"),
        ({"reactive": {}}, r"^tune.reactive: empty grid"),
        ({"reactive": {"c": []}}, r"^tune.reactive.c=\[\]: empty grid"),
        ({"reactive": {"c": [2, 0]}}, r"^tune.reactive: c=0: must be >= 1"),
        ({"tepa_rev": {"theta_rev": [0.3, 1.5]}}, r"^tune.tepa_rev: theta_rev=1.5: must be in \[0, 1\]"),
        ({"keep_first": {"top_k": [1]}}, r"^tune.keep_first: not a method of the map"),
    ],
)
def test_a_bad_tuning_grid_is_one_line_naming_the_key(tmp_path, tune, message):
    with pytest.raises(ConfigError, match=message):
        load_map(declaration(tmp_path, tune))


def test_seeds_shared_by_tuning_and_evaluation_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^tuning_seeds: seed 3 is also an evaluation seed"):
        load_map(declaration(tmp_path, TINY_GRID, tuning_seeds=(3, 1000)))
    with pytest.raises(ConfigError, match=r"^tuning_seeds: seed 1000 is also an evaluation seed"):
        load_map(declaration(tmp_path, TINY_GRID), ["seeds=[0,1000]"])
    with pytest.raises(ConfigError, match=r"^tuning_seeds=\[\]: must be a non-empty list"):
        load_map(declaration(tmp_path, TINY_GRID, tuning_seeds=()))
    untuned = tmp_path / "untuned.yaml"  # even with nothing to tune: the best baseline is picked on them
    untuned.write_text(json.dumps({"experiment": "robustness_map", "tune": {}}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^tuning_seeds=None: must be a non-empty list"):
        load_map(untuned)


def test_an_evidence_budget_below_one_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "budget.yaml"
    body = {"experiment": "robustness_map", "tuning_seeds": [1000], "evidence_budget": 0}
    path.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^evidence_budget=0: must be an int >= 1"):
        load_map(path)


def test_a_grid_value_out_of_range_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^env.noise=0.9: must be in \[0, 0.5\]$"):
        load_map(declaration(tmp_path, {}), ["env.noise=0,0.9"])
    with pytest.raises(ConfigError, match=r"^env.reversal_rate=-0.1: must be in \[0, 1\]$"):
        load_map(declaration(tmp_path, {}), ["env.reversal_rate=-0.1"])


def test_bad_input_stops_the_driver_with_one_line_before_any_episode(tmp_path, capsys):
    path = declaration(tmp_path, {"reactive": {"c": []}})
    assert main(["--map", str(path), f"results_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["map: tune.reactive.c=[]: empty grid (give a non-empty list of values)"]
    assert not (tmp_path / "out").exists()


def test_the_noise_hypothesis_runs_every_method_at_its_defaults_at_the_papers_phase_lengths():
    spec = load_map("noise_hypothesis")
    assert spec.env["phase_length"] == 400 and spec.tune == {}
    assert spec.tuning_seeds and not set(spec.tuning_seeds) & set(spec.eval_seeds)
    assert spec.methods == ("no_memory", "append_only", "lww", "tepa_rev")
    assert {"env.noise": 0.0} in spec.cells() and len(spec.cells()) >= 5
    tune = tuning_jobs(spec)  # every method at its defaults on the tuning seeds: the baseline is picked there
    assert len(tune) == len(spec.cells()) * 4
    assert all(not job.params and job.seeds == spec.tuning_seeds for job in tune)
    jobs = evaluation_jobs(spec, {})
    assert len(jobs) == len(spec.cells()) * 4 and all(not job.params for job in jobs)
