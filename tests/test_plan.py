"""`plan=true`: what a run will cost, from a dry pass with the simulated reader; and `llm.max_total_tokens`,
which stops a run cleanly and resumably."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from runners.config import ConfigError
from runners.run import RunStopped
from runners.runlog import EPISODES, PARTIAL_EPISODES
from tests.helpers.runner import run_overrides
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
    """The numbers of the plan line just printed."""
    line = capsys.readouterr().out.strip().splitlines()[-1]
    words = line.replace(",", "").split()
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
