"""The benchmark code at tiny sizes: what it feeds the memories, how it computes ratios and slopes, the
structure of its JSON and report. No timing is asserted (these machines are shared and noisy)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.bench import agent as bench_agent
from runners.bench import breakdown
from runners.bench import memory as bench_memory
from runners.bench import suite as bench
from runners.launch import reproduce
from runners.launch.reproduce import Step
from runners.registry import build_memory, swept_memories
from tepa.evidence import Evidence
from tepa.tepa_full import TEPAFull
from tests.helpers.shared_data import DATA_DIR

ROOT = Path(__file__).resolve().parents[1]
DATA = str(DATA_DIR)


class Counting:
    """A memory that records every protocol call."""

    name = "counting"

    def __init__(self):
        self.calls = {"observe": 0, "retrieve": 0, "feedback": 0, "boundary": 0}
        self.used = []

    def observe(self, obs):
        self.calls["observe"] += 1

    def retrieve(self, query):
        self.calls["retrieve"] += 1
        return [Evidence(query.key, "v0", True, query.t), Evidence(query.key, "v1", True, query.t)]

    def feedback(self, used, success, t):
        self.calls["feedback"] += 1
        self.used.append(used)

    def on_phase_boundary(self, phase, t):
        self.calls["boundary"] += 1

    def snapshot(self):
        return {}


def test_the_stream_is_deterministic_and_counts_its_events():
    a = bench_memory.make_stream(n_observations=403, n_keys=7, n_phases=4, decide_every=3, seed=5)
    b = bench_memory.make_stream(n_observations=403, n_keys=7, n_phases=4, decide_every=3, seed=5)
    assert a == b
    assert a != bench_memory.make_stream(n_observations=403, n_keys=7, n_phases=4, decide_every=3, seed=6)
    steps = [s for phase in a.phases for s in phase]
    assert len(steps) == a.n_observations == 403 and len(a.phases) == 4
    assert a.n_decisions == sum(q is not None for _, q in steps) == len(range(0, 403, 3))
    assert a.n_events == 403 + 2 * a.n_decisions
    assert a.regimes[-1] == a.regimes[0]  # the last phase returns to the first regime
    for i, phase in enumerate(a.phases):
        for obs, query in phase:
            assert obs.holds == (obs.value == a.regimes[i][obs.key])
            assert query is None or (query.key == obs.key and query.t == obs.t)


@pytest.mark.parametrize(
    "param, value",
    [("n_observations", 0), ("n_keys", 0), ("n_values", 1), ("decide_every", 0), ("n_phases", True)],
)
def test_bad_stream_parameters_are_named(param, value):
    with pytest.raises(ValueError, match=param):
        bench_memory.make_stream(**{param: value})
    with pytest.raises(ValueError, match="p_correct"):
        bench_memory.make_stream(p_correct=1.5)


def test_every_event_of_the_stream_goes_through_the_protocol():
    stream = bench_memory.make_stream(n_observations=100, n_keys=5, n_phases=3, decide_every=2)
    memory = Counting()
    seconds = bench_memory.run_stream_ops(memory, stream)
    assert seconds >= 0
    assert memory.calls == {"observe": 100, "retrieve": 50, "feedback": 50, "boundary": 2}
    # feedback gets the retrieved evidence whose value was acted on, as in the agent loop
    decisions = [obs for phase in stream.phases for obs, q in phase if q is not None]
    assert [[e.value for e in used] for used in memory.used] == [
        [obs.value] if obs.value in ("v0", "v1") else [] for obs in decisions
    ]


def test_tepa_full_gets_trials_from_the_stream():
    stream = bench_memory.make_stream(n_observations=300, n_keys=4, n_phases=4)
    memory = build_memory("tepa_full")
    assert isinstance(memory, TEPAFull)
    bench_memory.run_stream_ops(memory, stream)
    snap = memory.snapshot()
    assert snap["trials"] > 0 and snap["promotions"] > 0


def test_ratios_are_taken_within_each_repetition(monkeypatch):
    stream = bench_memory.make_stream(n_observations=10, n_keys=2)
    times = {"lww": iter([1.0, 2.0, 4.0]), "slow": iter([3.0, 4.0, 20.0])}
    monkeypatch.setattr(bench_memory, "run_stream_ops", lambda memory, s: next(times[memory]))
    out = bench_memory.measure({"lww": lambda: "lww", "slow": lambda: "slow"}, stream, repeats=3)
    assert out["lww"]["time_vs_lww"] == 1.0
    assert out["slow"]["time_vs_lww"] == 3.0  # median of 3/1, 4/2, 20/4
    assert out["slow"]["seconds"] == [3.0, 4.0, 20.0]
    assert out["slow"]["events_per_s"] == pytest.approx(stream.n_events / 4.0)
    with pytest.raises(ValueError, match="reference"):
        bench_memory.measure({"slow": lambda: "slow"}, stream, repeats=1)


def test_median_and_loglog_slope():
    assert bench_memory.median([3.0, 1.0, 2.0]) == 2.0
    assert bench_memory.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert bench_agent.loglog_slope([1, 10, 100], [5, 5, 5]) == 0.0
    assert bench_agent.loglog_slope([1, 10, 100], [2, 20, 200]) == pytest.approx(1.0)
    assert bench_agent.loglog_slope([1, 10, 100], [1, 100, 10_000]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        bench_agent.loglog_slope([1], [1])


def test_prompt_footprint_counts_tokens_per_decision():
    out = bench_agent.prompt_footprint(["lww", "append_only"], episodes=40, tail=10)
    assert set(out) == {"lww", "append_only"}
    for m in out.values():
        assert m["mean_prompt_tokens"] > 0 and m["final_prompt_tokens"] > 0
    # Append-Only's prompt grows with the stream, LWW's keeps one line per key
    assert out["append_only"]["final_prompt_tokens"] > out["append_only"]["mean_prompt_tokens"]
    assert out["append_only"]["mean_prompt_tokens"] > out["lww"]["mean_prompt_tokens"]
    with pytest.raises(ValueError, match="episodes"):
        bench_agent.prompt_footprint(["lww"], episodes=10)


def test_end_to_end_reports_each_environment_or_why_it_was_skipped(tmp_path):
    out = bench_agent.end_to_end(
        {"controlled_drift": ("lww", "tepa_rev"), "no_such_env": ("lww",)},
        repeats=2,
        overrides={"controlled_drift": ("env.phase_length=3",)},
        scratch=tmp_path,
    )
    cd = out["controlled_drift"]
    assert set(cd["methods"]) == {"lww", "tepa_rev"}
    for m in cd["methods"].values():
        assert m["episodes"] == 12 and len(m["seconds"]) == 2 and m["episodes_per_s"] > 0
    assert cd["episodes_per_s"] > 0
    assert "no_such_env" in out["no_such_env"]["skipped"]
    assert list(tmp_path.iterdir()) == []  # scratch results are removed


def test_scaling_reports_costs_and_slopes_per_method():
    out = bench_agent.scaling(["lww", "append_only"], base=8, factors=(1, 10), window=3, repeats=1)
    assert out["sizes"] == [8, 80] and out["window"] == 3
    ao, lww = out["methods"]["append_only"], out["methods"]["lww"]
    for m in (ao, lww):
        assert len(m["us_per_episode"]) == len(m["prompt_tokens"]) == 2
        assert all(x > 0 for x in m["us_per_episode"])
        assert math.isfinite(m["slope_time"]) and math.isfinite(m["slope_tokens"])
    assert ao["prompt_tokens"][1] > ao["prompt_tokens"][0]  # 10x the history in the prompt
    assert ao["slope_tokens"] > lww["slope_tokens"]
    with pytest.raises(ValueError, match="window"):
        bench_agent.scaling(["lww"], window=1)


def test_reproduce_times_what_the_makefile_runs():
    recipe = (ROOT / "Makefile").read_text().split("\nreproduce:")[1].split("\n\n")[0]
    assert "$(BIN)/python -m runners.launch.reproduce --results-dir results" in recipe
    experiments, analysis = bench.reproduce_commands("results_tmp")
    assert experiments == reproduce.steps("results_tmp")
    assert analysis[1:] == ["-m", "analysis", "--runs", "results_tmp/runs", "--out", "results_tmp", "--quiet"]


def test_reproduce_timing_skips_guarded_steps_and_reports_a_failure(monkeypatch):
    py = sys.executable
    steps = [
        Step("ok", None, [py, "-c", "pass"]),
        Step("guarded", [py, "-c", "raise SystemExit(1)"], [py, "-c", "raise SystemExit('never run')"]),
        Step("also_ok", [py, "-c", "pass"], [py, "-c", "pass"]),
    ]
    monkeypatch.setattr(bench, "reproduce_commands", lambda results_dir: (steps, [py, "-c", "pass"]))
    out = bench.time_reproduce()
    assert set(out["steps_s"]) == {"ok", "also_ok", "analysis"} and out["skipped_steps"] == ["guarded"]
    assert out["wall_s"] >= max(out["steps_s"].values())
    assert out["verification"]["streams"] == 0  # these steps write no streams to verify
    steps.append(Step("broken", None, [py, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]))
    out = bench.time_reproduce()
    assert "wall_s" not in out and out["failed"] == "broken: exit 3: boom"


def test_the_run_tree_size_is_what_du_reports(tmp_path):
    (tmp_path / "runs" / "a" / "seed=0").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "seed=0" / "episodes.parquet").write_bytes(b"x" * 1234)
    (tmp_path / "runs" / "meta.json").write_text("{}")
    du = subprocess.run(["du", "-sb", str(tmp_path / "runs")], capture_output=True, text=True, check=True)
    assert bench.tree_bytes(tmp_path / "runs") == int(du.stdout.split()[0])
    assert bench.tree_bytes(tmp_path / "nothing") == 0


def test_reproduce_timing_can_keep_its_outputs_in_a_new_folder_only(tmp_path, monkeypatch):
    py = sys.executable
    write = "import pathlib, sys; pathlib.Path(sys.argv[1], 'tables').mkdir()"
    monkeypatch.setattr(
        bench,
        "reproduce_commands",
        lambda d: ([Step("write", None, [py, "-c", write, d])], [py, "-c", "pass"]),
    )
    keep = tmp_path / "kept"
    assert bench.time_reproduce(keep)["steps_s"].keys() == {"write", "analysis"}
    assert (keep / "tables").is_dir()  # kept for a diff with results/tables
    with pytest.raises(FileExistsError):  # a timing over streams that would be skipped means nothing
        bench.time_reproduce(keep)


def test_quick_run_writes_the_json_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("TEPA_DATA_DIR", DATA)
    out = tmp_path / "r" / "bench.json"
    assert bench.main(["--quick", "--skip-reproduce", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) == {
        "meta",
        "memory_ops",
        "prompt_footprint",
        "end_to_end",
        "scaling",
        "retrieval",
        "reproduce",
        "samples",
        "map",
        "breakdown",
        "tests",
        "targets",
    }
    assert set(report["memory_ops"]["methods"]) == set(bench_agent.PAPER_MEMORIES)
    assert report["memory_ops"]["methods"]["lww"]["time_vs_lww"] == 1.0
    assert set(report["end_to_end"]) == set(bench.E2E_ENVS)
    assert report["reproduce"] == report["samples"] == {"skipped": "--skip-reproduce"}
    targets = {t["figure"]: t for t in report["targets"]}
    tokens = report["prompt_footprint"]["methods"]
    ratio = targets["prompt tokens: TEPA-Rev / LWW"]
    assert ratio["value"] == tokens["tepa_rev"]["mean_prompt_tokens"] / tokens["lww"]["mean_prompt_tokens"]
    assert ratio["met"] == (ratio["value"] <= 1.2)
    assert targets["make reproduce: wall seconds"]["met"] is None
    assert report["map"] == {"skipped": "--quick"} and targets["make map: wall seconds"]["met"] is None
    dense = targets["dense retrieval: paper_preference run wall time / keyed"]
    run = report["retrieval"]["run"]
    assert dense["value"] == run["dense_ratio"] > 0 and run["dense_cpu_ratio"] > 0 and run["rounds"] == 1
    assert run["seconds"]["dense"] > 0 and run["seconds"]["keyed"] > 0
    assert report["retrieval"]["ratio_to_keyed"]["keyed"] == 1.0
    md = (tmp_path / "r" / "bench.md").read_text()
    for figure in targets:
        assert f"| {figure} |" in md
    assert "| memoryagentbench |" in md and "not timed" in md
    assert "`make map`: not timed (--quick)." in md
    assert report["tests"] == {"skipped": "--quick"} and targets["make test: wall seconds"]["met"] is None
    controlled = report["breakdown"]["paper_controlled"]
    assert set(controlled["cpu_s"]) == set(breakdown.STAGES) and controlled["jobs"] == len(
        bench_agent.PAPER_MEMORIES
    )
    assert controlled["cpu_s"]["configuration"] > 0 and controlled["cpu_s"]["memory"] > 0
    assert 0 < controlled["floor_us_per_episode"] < controlled["us_per_episode"]
    assert "| paper_controlled | 10 | 200 |" in md and "**Cost per episode and its floor**" in md


def test_the_sample_cost_times_the_drift_experiments_with_samples_logged_and_not():
    from runners.bench.samples import sample_cost

    # one method of each experiment's sweep: the code path is the same for ten, at a tenth of the time;
    # n_jobs=1: joblib runs that one job in the launcher's process instead of starting workers for it
    one_method = ("env.phase_length=5", "hydra.sweeper.params.memory=append_only", "hydra.launcher.n_jobs=1")
    cost = sample_cost(1, bench.tree_bytes, seeds=(0,), overrides=one_method)
    assert cost["experiments"] == ["paper_executable", "paper_controlled"] and cost["seeds"] == [0]
    assert cost["seconds_logged"] > 0 and cost["seconds_unlogged"] > 0
    assert cost["cpu_seconds_logged"] > 0 and cost["cpu_seconds_unlogged"] > 0
    assert cost["rounds"] == len(cost["round_ratios"]) == 1
    assert cost["ratio"] == cost["round_ratios"][0]
    # the seconds are rounded to 0.01 s and the ratio to 0.001: what that rounding leaves between them
    logged, unlogged = cost["seconds_logged"], cost["seconds_unlogged"]
    rounding = 0.005 * (1 + logged / unlogged) / unlogged + 0.0005
    assert cost["ratio"] == pytest.approx(logged / unlogged, abs=rounding)
    assert cost["tree_ratio"] > 1  # the logged options, evidence, truth and quality take room


def test_the_map_timing_runs_the_makefile_recipe_into_another_results_dir():
    from runners.bench.map_timing import map_commands

    runs, hypothesis, analysis = map_commands("results_tmp")
    assert runs[1:] == ["-m", "runners.map", "results_dir=results_tmp", "progress=false"]
    assert hypothesis[1:] == ["-m", "runners.map", "--map", "noise_hypothesis",
                              "results_dir=results_tmp/noise_hypothesis", "progress=false"]  # fmt: skip
    assert analysis[1:] == [
        "-m",
        "analysis.map",
        "--out",
        "results_tmp",
        "--hypothesis",
        "results_tmp/noise_hypothesis",
    ]


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--episodes", "30"], ["--scaling-window", "1"]])
def test_bad_arguments_stop_with_the_option_named(argv, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert argv[0] in capsys.readouterr().err


def test_only_samples_updates_that_section_of_a_full_report_and_its_markdown(tmp_path, monkeypatch):
    report = json.loads((Path(__file__).parents[1] / "results" / "bench.json").read_text())
    out = tmp_path / "bench.json"
    out.write_text(json.dumps(report))
    cost = {"experiments": ["paper_controlled"], "seeds": [0], "rounds": 2, "seconds_logged": 2.0,
            "seconds_unlogged": 1.0, "ratio": 2.0, "round_ratios": [2.0, 2.0], "cpu_seconds_logged": 3.0,
            "cpu_seconds_unlogged": 1.5, "cpu_ratio": 2.0, "tree_ratio": 1.2}  # fmt: skip
    monkeypatch.setattr(bench, "sample_cost", lambda repeats, tree_bytes, **kw: cost)
    assert bench.main(["--only", "samples", "--out", str(out)]) == 0
    updated = json.loads(out.read_text())
    assert updated["samples"] == cost and updated["memory_ops"] == report["memory_ops"]
    command = updated["meta"]["updated"]["samples"]["command"]
    assert command == f"python -m runners.bench --only samples --out {out}"
    row = next(t for t in updated["targets"] if t["figure"].startswith("make reproduce: wall time with"))
    assert row["value"] == 2.0 and row["met"] is False
    md = (tmp_path / "bench.md").read_text()
    assert "The samples section was measured again on" in md and "CPU seconds 3 against 1.5, 2 x" in md


def test_only_reproduce_times_it_once_into_the_kept_folder_and_updates_its_target(tmp_path, monkeypatch):
    report = json.loads((Path(__file__).parents[1] / "results" / "bench.json").read_text())
    out = tmp_path / "bench.json"
    out.write_text(json.dumps(report))
    kept = []
    timing = {**report["reproduce"], "wall_s": 99.0, "cpu_s": 190.0}
    monkeypatch.setattr(bench, "time_reproduce", lambda keep: kept.append(keep) or timing)
    argv = ["--only", "reproduce", "--out", str(out), "--reproduce-dir", str(tmp_path / "rep")]
    assert bench.main(argv) == 0
    updated = json.loads(out.read_text())
    assert kept == [tmp_path / "rep"] and updated["reproduce"] == timing and updated["map"] == report["map"]
    assert updated["meta"]["updated"]["reproduce"]["repeats"] == 1
    row = next(t for t in updated["targets"] if t["figure"] == "make reproduce: wall seconds")
    assert row["value"] == 99.0 and row["met"] is True
    cpu = next(t for t in updated["targets"] if t["figure"] == "make reproduce: CPU seconds")
    assert cpu["value"] == 190.0 and cpu["met"] is True
    md = (tmp_path / "bench.md").read_text()
    assert "The reproduce section was measured again on" in md and "--reproduce-dir" not in md
    assert f"(`python -m runners.bench --only reproduce --out {out}`, once," in md


def test_only_stops_on_an_out_file_that_is_not_json(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    out.write_text("{torn")
    monkeypatch.setattr(bench, "sample_cost", lambda repeats, tree_bytes, **kw: {})
    with pytest.raises(SystemExit, match="not a readable bench report"):
        bench.main(["--only", "samples", "--out", str(out)])
    assert out.read_text() == "{torn"


def test_only_retrieval_measures_that_benchmark_alone(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_cost(repeats, overrides=()):
        calls.append((repeats, tuple(overrides)))
        return {"seconds": {"keyed": 1.0, "dense": 1.5}, "ratio_to_keyed": {"keyed": 1.0, "dense": 1.5}}

    def fake_run(repeats, overrides=()):
        calls.append(("run", repeats, tuple(overrides)))
        return {"dense_ratio": 1.2}

    monkeypatch.setattr(bench, "retrieval_cost", fake_cost)
    monkeypatch.setattr(bench, "run_cost", fake_run)
    monkeypatch.chdir(tmp_path)
    assert bench.main(["--only", "retrieval", "--repeats", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"meta", "retrieval"} and printed["retrieval"]["ratio_to_keyed"]["dense"] == 1.5
    assert printed["meta"]["command"] == "python -m runners.bench --only retrieval"
    assert printed["retrieval"]["run"] == {"dense_ratio": 1.2}
    assert calls == [(2, ()), ("run", 2, ())] and not (tmp_path / "results").exists()  # bench.* untouched
    out = tmp_path / "o" / "retrieval.json"
    assert bench.main(["--only", "retrieval", "--quick", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["retrieval"] == printed["retrieval"]
    quick = bench.QUICK_ENV_OVERRIDES["preference_stream"]
    assert calls[2:] == [(1, quick), ("run", 1, (*quick, *bench.QUICK_RETRIEVAL_RUN))]


def test_each_module_belongs_to_one_stage_and_built_ins_to_none():
    assert breakdown.stage_of(f"{ROOT}/envs/executable_drift/sandbox.py") == "environment"
    assert breakdown.stage_of(f"{ROOT}/tepa/tepa_rev.py") == "memory"
    assert breakdown.stage_of(f"{ROOT}/runners/agent/prompt.py") == "prompt"
    assert breakdown.stage_of(f"{ROOT}/runners/llm/simulated/reader.py") == "reader"
    assert breakdown.stage_of("/venv/site-packages/pyarrow/parquet/core.py") == "logging"
    assert breakdown.stage_of("/venv/site-packages/omegaconf/dictconfig.py") == "configuration"
    assert breakdown.stage_of(f"{ROOT}/runners/agent/loop.py") == "loop"
    assert breakdown.stage_of("~") is None


def test_the_breakdown_reports_memoryagentbench_as_skipped_without_its_data(tmp_path, monkeypatch):
    monkeypatch.setenv("TEPA_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the download fails at once
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    report = breakdown.breakdown(("paper_memoryagentbench",))
    assert set(report) == {"paper_memoryagentbench"}
    assert report["paper_memoryagentbench"]["skipped"].startswith("ConfigError: env: ")


def test_a_built_in_functions_time_goes_to_the_stage_of_its_callers(tmp_path):
    import cProfile
    import pstats

    from envs.executable_drift.sandbox import read_plain

    path = str(tmp_path / "f")
    (tmp_path / "f").write_bytes(b"x" * 1000)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        read_plain(path)  # its time is mostly its system calls: os.open, os.fstat, os.read, os.close
    profiler.disable()
    stats = pstats.Stats(profiler)
    stages = breakdown.stage_seconds(stats)
    table = stats.stats
    own = sum(timing[2] for timing in table.values())
    envs = [f for f in table if breakdown.stage_of(f[0]) == "environment"]
    called = sum(t[2] for f, t in table.items() if f[0] == "~" for c, t in t[4].items() if c in envs)
    assert math.isclose(sum(stages.values()), own, rel_tol=1e-6)
    assert called > 0 and math.isclose(
        stages["environment"], sum(table[f][2] for f in envs) + called, rel_tol=1e-6
    )


def test_the_standard_librarys_time_goes_to_the_stage_of_its_callers_and_the_loops_is_its_own():
    import json as json_module
    import random

    assert breakdown.stage_of(random.__file__) is None and breakdown.stage_of(json_module.__file__) is None
    assert breakdown.stage_of(str(ROOT / "envs" / "controlled_drift.py")) == "environment"
    assert breakdown.stage_of(str(ROOT / "runners" / "agent" / "loop.py")) == "loop"
    assert breakdown.stage_of(pytest.__file__) == "loop"  # an installed package is not the standard library


def test_an_executable_stream_is_timed_with_its_jobs_seeds_at_once_and_the_others_alone(monkeypatch):
    timed_with = {}

    def profile(overrides, seed=0, warm=False, together=1):
        timed_with[overrides[0]] = together
        return {"episodes": 10, "cpu_s": 1.0, "stages": dict.fromkeys(breakdown.STAGES, 1.0 / 7)}

    monkeypatch.setattr(breakdown, "profile_stream", profile)
    monkeypatch.setattr(breakdown, "composition_seconds", lambda overrides: 0.0)
    monkeypatch.setattr(breakdown, "tool_floor", lambda: {"total_us": 0.0})
    report = breakdown.breakdown(("paper_executable", "paper_controlled"))
    entry = report["paper_executable"]
    assert timed_with == {
        "experiment=paper_executable": entry["streams"] // entry["jobs"],  # a job's streams share a worker
        "experiment=paper_controlled": 1,
    }
    assert entry["cpu_s"]["environment"] == pytest.approx(entry["streams"] / 7, abs=0.01)


def test_a_stream_timed_with_others_is_charged_its_share_of_their_cpu_and_episodes():
    overrides = ("env=executable_drift", "env.phase_length=3", "memory=lww", "seeds=[0]")
    alone = breakdown.profile_stream(overrides)
    shared = breakdown.profile_stream(overrides, together=3)
    assert alone["episodes"] == shared["episodes"] == 12  # four phases of three episodes, per stream
    assert shared["cpu_s"] > 0 and sum(shared["stages"].values()) == pytest.approx(shared["cpu_s"])


def test_the_tool_floor_is_one_real_call_through_the_worker():
    floor = breakdown.tool_floor(calls=50)
    assert floor["total_us"] == pytest.approx(floor["parent_us"] + floor["worker_us"], abs=0.2)
    assert floor["parent_us"] > 0 and floor["in_process_us"] > 0  # the same calls without the worker


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning to a CPU needs Linux")
def test_the_breakdown_profiles_on_one_cpu_as_make_reproduce_runs_a_job_and_then_unpins(monkeypatch):
    seen = []

    def profile(overrides, seed=0, warm=False, together=1):
        seen.append(os.sched_getaffinity(0))
        return {"episodes": 1, "cpu_s": 1.0, "stages": dict.fromkeys(breakdown.STAGES, 0.1)}

    monkeypatch.setattr(breakdown, "profile_stream", profile)
    monkeypatch.setattr(breakdown, "composition_seconds", lambda overrides: 0.0)
    before = os.sched_getaffinity(0)
    report = breakdown.breakdown(("paper_controlled",))
    assert report["paper_controlled"]["jobs"] == len(seen) > 1
    assert all(cpus == {min(before)} for cpus in seen)
    assert os.sched_getaffinity(0) == before


def test_the_test_suite_timing_runs_make_tests_command_and_reads_its_summary():
    from runners.bench.testsuite import command, time_tests

    argv = command(ROOT)
    recipe = subprocess.run(["make", "-n", "-s", "test"], cwd=ROOT, capture_output=True, text=True).stdout
    assert " ".join(argv[1:-2]) in recipe.replace('"', "") and argv[-2:] == ["-p", "no:cacheprovider"]
    assert argv[argv.index("-n") + 1] == "2"  # two workers, one per core of the target machine
    timed = time_tests(ROOT, paths=("tests/test_parse.py",))
    assert timed["exit_code"] == 0 and timed["workers"] == 2 and timed["wall_s"] > 0
    assert timed["summary"].endswith("passed") and int(timed["summary"].split()[0]) > 0


def test_the_viewer_timing_builds_the_readmes_page_of_a_run_folder_and_reports_a_failure(tmp_path):
    from tests.helpers.runner import run_overrides

    overrides = ("env.phase_length=5", "memory=lww", "seeds=[0]", f"results_dir={tmp_path}", "progress=false")
    run_overrides(*overrides)
    timed = bench.time_viewer(tmp_path / "runs")
    assert timed["experiment"] == "runs" and timed["cpu_s"] > 0 and timed["wall_s"] > 0
    missing = bench.time_viewer(tmp_path / "nothing-here")
    assert missing["experiment"] == "nothing-here" and "nothing-here" in missing["failed"]


def test_the_breakdowns_profiler_counts_cpu_time_so_waiting_for_the_tool_worker_is_not_a_stage():
    import pstats
    import time

    profiler = breakdown.cpu_profiler()
    profiler.enable()
    time.sleep(0.3)  # as the environment waits for the worker's reply: no CPU of this process
    profiler.disable()
    assert sum(breakdown.stage_seconds(pstats.Stats(profiler)).values()) < 0.1


def test_configuration_counts_the_compositions_make_reproduce_makes_of_each_experiments_jobs():
    # the first experiment's jobs run in worker processes, which compose them again; the others run in
    # the sweep's process on the sweeper's configs; MemoryAgentBench's jobs override env.source, so its
    # run identity composes each memory's options once (counted in a real multirun: 30 + 5)
    points = {e: list(breakdown.sweep_points(e)) for e in breakdown.EXPERIMENTS}
    first, *others = breakdown.EXPERIMENTS
    assert breakdown.compositions(first, points[first]) == 2 * len(points[first])
    for experiment in others:
        extra = len(swept_memories(experiment)) if experiment == "paper_memoryagentbench" else 0
        assert breakdown.compositions(experiment, points[experiment]) == len(points[experiment]) + extra
