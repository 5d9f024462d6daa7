"""`plan=true`: what a run will cost, from a dry pass with the simulated reader; and `llm.max_total_tokens`,
which stops a run cleanly and resumably."""

from __future__ import annotations

import contextlib
import resource

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import EPISODES, PARTIAL_EPISODES
from runners.compose import compose_spec
from runners.config import ConfigError
from runners.plan import money
from runners.registry import swept_memories
from runners.run import RunStopped
from tests.helpers.runner import cli, run_overrides
from tests.helpers.stub_server import echoed

SMALL = ("env=controlled_drift_words", "env.phase_length=10", "seeds=[0,1]", "progress=false")


def run(results, *overrides: str):
    return run_overrides(f"results_dir={results}", *SMALL, *overrides)


def loglik(stub) -> tuple[str, ...]:
    return (
        "llm=openai",
        "llm.model=stub",
        "llm.scoring=loglik",
        f"llm.base_url={stub.base_url}",
        "llm.timeout=5",
    )


def planned(capsys) -> dict[str, float]:
    """The numbers of the plan line just printed (thousands separators and the currency sign dropped)."""
    line = capsys.readouterr().out.strip().splitlines()[-1]
    words = line.replace(",", "").replace("$", "").split()
    number = {w: float(words[i - 1]) for i, w in enumerate(words) if w in ("stream(s)", "decisions", "model")}
    return {
        "streams": number["stream(s)"],
        "decisions": number["decisions"],
        "calls": number["model"],
        "prompt_tokens": float(words[words.index("prompt") - 1]),
        "cost": float(words[words.index("cost") + 2]) if "cost" in words else 0.0,
    }


def test_a_plan_prints_streams_calls_tokens_and_cost_and_runs_nothing(tmp_path, capsys, stub_server):
    summary = run(tmp_path, *loglik(stub_server), "memory=append_only", "plan=true", "llm.price_in=2.5")
    plan = planned(capsys)
    assert summary.streams == () and not (tmp_path / "runs").exists() and stub_server.requests == []
    assert plan["streams"] == 2 and plan["decisions"] == 2 * 40 and plan["calls"] == 3 * 80
    assert plan["cost"] == pytest.approx(plan["prompt_tokens"] * 2.5 / 1e6, rel=1e-3)


@pytest.mark.parametrize("memory", ["append_only", "tepa_rev"])
def test_the_plans_tokens_are_within_ten_percent_of_what_the_run_then_reports(
    tmp_path, capsys, stub_server, memory
):
    """The stub always favours "red" (the simulated reader follows memory): the choices, and so what memory
    holds, differ between the plan and the run; the stub reports no usage, so the backend estimates the
    tokens of what it really sent."""
    stub_server.respond = lambda body: echoed(body, favour="red")
    run(tmp_path, *loglik(stub_server), f"memory={memory}", "plan=true")
    plan = planned(capsys)
    run(tmp_path, *loglik(stub_server), f"memory={memory}")
    logged = [pq.read_table(p).to_pylist() for p in tmp_path.glob(f"runs/adhoc/**/{memory}/**/{EPISODES}")]
    rows = [r for stream in logged for r in stream]
    assert len(rows) == plan["decisions"] and len(stub_server.requests) == plan["calls"]
    spent = sum(r["prompt_tokens"] for r in rows)
    print(f"\n{memory}: plan {plan['prompt_tokens']:.0f} prompt tokens, the run {spent}")
    assert abs(plan["prompt_tokens"] - spent) <= 0.1 * spent, (plan["prompt_tokens"], spent)


def test_a_plan_checks_the_prices(tmp_path, stub_server):
    with pytest.raises(ConfigError, match=r"^llm\.price_out=-1(\.0)?: must be >= 0"):
        run(tmp_path, *loglik(stub_server), "plan=true", "llm.price_out=-1")


def test_the_token_budget_stops_the_run_cleanly_and_a_rerun_resumes_it(tmp_path, stub_server):
    stub_server.respond = lambda body: echoed(body, favour="blue", usage=True)
    with pytest.raises(RunStopped, match=r"llm\.max_total_tokens=3000 spent .* rerun the same command"):
        run(tmp_path / "a", *loglik(stub_server), "memory=lww", "llm.max_total_tokens=3000")
    partial = list((tmp_path / "a").glob(f"runs/adhoc/**/lww/**/{PARTIAL_EPISODES}"))
    assert partial and not list((tmp_path / "a").glob(f"runs/adhoc/**/lww/**/{EPISODES}"))
    summary = run(tmp_path / "a", *loglik(stub_server), "memory=lww")  # no budget: it finishes
    assert summary.episodes_run < 80 and sum(s.replayed for s in summary.streams) > 0
    run(tmp_path / "b", *loglik(stub_server), "memory=lww")  # uninterrupted

    def decisions(root):
        paths = sorted(root.glob(f"runs/adhoc/**/lww/**/{EPISODES}"))
        return [(r["seed"], r["t"], r["action"]) for p in paths for r in pq.read_table(p).to_pylist()]

    assert decisions(tmp_path / "a") == decisions(tmp_path / "b") and len(decisions(tmp_path / "b")) == 80


def paper_sweep(experiment: str) -> tuple[int, int, int]:
    """The methods, seeds and decisions per stream of a paper experiment, from the registry (the memory
    group, less the experiment's glob exclude list) and the experiment's config: never a literal, so
    that a method added as the README says changes none of the tests."""
    spec = compose_spec([f"experiment={experiment}"])
    with contextlib.closing(spec.env.build()) as env:
        env.reset(spec.seeds[0])
        return len(swept_memories(experiment)), len(spec.seeds), len(env)


def test_a_plan_of_a_paper_sweep_writes_nothing_answers_in_seconds_and_ends_with_a_total(tmp_path):
    """Hydra writes its job folders before a task runs; a plan is answered before Hydra starts. The
    whole paper sweep (every method x 20 seeds x 1600 decisions) in seconds of the process's CPU."""
    methods, seeds, decisions = paper_sweep("paper_controlled")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = cli(tmp_path, "-m", "experiment=paper_controlled", "llm=openai", "llm.model=m", "plan=true",
               "llm.price_in=0.15", "llm.price_out=0.6", f"results_dir={tmp_path / 'results'}")  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.rglob("*")), list(tmp_path.rglob("*"))  # no results_dir, no hydra folder
    lines = proc.stdout.strip().splitlines()
    runs = [line for line in lines if line.startswith("plan paper_controlled controlled_drift ")]
    assert len(runs) == methods and lines[methods].startswith("TOTAL")
    streams, total = methods * seeds, methods * seeds * decisions
    assert lines[methods].startswith(f"TOTAL ({methods} run(s)): {streams:,} stream(s), {total:,} decisions")
    for line in (*runs, lines[len(runs)]):
        assert "prompt tokens (estimate)" in line and "completion tokens (bound)" in line
        assert " (prompts) + at most $" in line and " (completions) = at most about $" in line
    bounds = [int(line.split("at most ")[1].split()[0].replace(",", "")) for line in runs]
    assert bounds == [seeds * decisions * 64] * methods  # calls x llm.max_tokens
    assert "an estimate" in lines[-1] and "a bound" in lines[-1]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # A bound, not the budget (a quiet machine measures about 4 s): a full dry pass took over 100 s.
    assert cpu < 15.0, f"{cpu:.1f} s of CPU"


def test_a_plan_names_a_bad_override_or_a_sweep_without_multirun_in_one_line(tmp_path):
    proc = cli(tmp_path, "memory=lww,tepa_rev", "plan=true", f"results_dir={tmp_path}")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "memory=lww,tepa_rev: a sweep; add -m" in proc.stderr
    proc = cli(tmp_path, "memory=nope", "plan=true", f"results_dir={tmp_path}")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "nope" in proc.stderr, proc.stderr
    assert not list(tmp_path.rglob("*"))


def test_a_plans_sweep_is_the_jobs_hydra_would_launch(tmp_path):
    proc = cli(tmp_path, "-m", "memory=lww,no_memory", "seed=0,1", "max_episodes=5", "plan=true",
               f"results_dir={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [
        "plan adhoc controlled_drift lww seed=0", "plan adhoc controlled_drift lww seed=1",
        "plan adhoc controlled_drift no_memory seed=0", "plan adhoc controlled_drift no_memory seed=1",
    ]  # fmt: skip
    assert all(" 1 stream(s), 5 decisions, 5 model calls" in line for line in lines[:4])
    assert lines[4].startswith("TOTAL (4 run(s)): 4 stream(s), 20 decisions")


def test_a_plan_says_when_nothing_bounds_the_completion_tokens(tmp_path, capsys, stub_server):
    text = ("llm=openai", "llm.model=stub", f"llm.base_url={stub_server.base_url}", "llm.max_tokens=null")
    run(tmp_path, *text, "plan=true", "llm.price_out=1")
    line = capsys.readouterr().out.strip()
    assert "no bound on completion tokens (llm.max_tokens=null)" in line and "at most" not in line
    assert line.endswith("; cost about $0.00 (prompts) + an unbounded cost of completions")
    run(tmp_path, *loglik(stub_server), "llm.max_tokens=null", "plan=true")  # scored options: one token each
    assert "at most 240 completion tokens (bound)" in capsys.readouterr().out


def test_each_point_of_a_sweep_is_named_by_its_swept_values(tmp_path):
    """Two thresholds of one method were two identical `plan mysweep controlled_drift tepa_rev:` lines."""
    proc = cli(tmp_path, "-m", "name=mysweep", "memory=tepa_rev,tepa_rev_facts", "memory.theta_rev=0.3,0.5",
               "max_episodes=5", "plan=true", f"results_dir={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = [line.split(":")[0] for line in proc.stdout.splitlines()[:4]]
    assert names == [
        "plan mysweep controlled_drift tepa_rev memory.theta_rev=0.3",
        "plan mysweep controlled_drift tepa_rev memory.theta_rev=0.5",
        # tepa_rev_facts is labelled tepa_rev: its option is named
        "plan mysweep controlled_drift tepa_rev memory=tepa_rev_facts memory.theta_rev=0.3",
        "plan mysweep controlled_drift tepa_rev memory=tepa_rev_facts memory.theta_rev=0.5",
    ]


def test_costs_carry_their_currency_and_large_numbers_their_separators(tmp_path):
    proc = cli(tmp_path, "-m", "experiment=paper_controlled", "memory=lww", "llm=openai", "llm.model=m",
               "llm.price_in=0.15", "llm.price_out=0.6", "plan=true", f"results_dir={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.splitlines()[0]
    assert " 32,000 decisions, 32,000 model calls, " in line and " 2,048,000 completion tokens " in line
    assert "$1.23 (completions)" in line  # 2,048,000 x 0.6 / 1e6
    assert "$ is the currency of llm.price_in" in proc.stdout.splitlines()[-1]
    assert [money(x) for x in (0, 0.00042, 0.5, 24.7301, 1234.5)] == [
        "$0.00", "$0.0004", "$0.5000", "$24.73", "$1,234.50"
    ]  # fmt: skip
