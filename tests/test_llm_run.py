"""The runner end to end on a REAL model: SmolLM2-135M-Instruct behind llama.cpp's server (make test-llm).

One command, `python -m runners.run -m memory=no_memory,append_only,tepa_rev seeds=[0,1] llm=local ...`
(controlled drift, 4 phases of 3 episodes: 12 episodes per stream, 72 in all), run through a FaultProxy
that counts what reaches the server: cold, then again into a fresh results_dir sharing the cache (free and
identical), then with 10% of every fault kind injected and a cache of its own (identical answers: llama.cpp
at temperature 0 is deterministic, whatever the order, concurrency and prompt-cache state of the requests).
Skipped, with the reason, when the local-llm extra is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.streamlog.stream import EPISODES, META
from runners.llm.local.serve import free_port, port_in_use
from runners.run import PROJECT_ROOT
from tests.helpers.fault_proxy import FaultProxy, FaultRates

pytestmark = pytest.mark.llm

SENTINEL = "sk-SENTINEL-run-never-write-me-7177"
KEY_ENV = "TEPA_LLM_RUN_TEST_KEY"
METHODS = ("no_memory", "append_only", "tepa_rev")
SEEDS = (0, 1)
EPISODES_PER_STREAM = 12  # env.phase_length=3 x 4 phases
DECISIONS = ("memory", "seed", "t", "action", "success", "reply")


@dataclass
class Run:
    results: Path
    proc: subprocess.CompletedProcess
    seconds: float
    upstream_requests: int  # requests the server received during this run


def run(results: Path, base_url: str, cache: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    """The experiment's command line, in a subprocess (so Hydra writes its output dir as it does for users),
    with the API key only in the environment."""
    command = [
        sys.executable, "-m", "runners.run", "-m", f"memory={','.join(METHODS)}", "seeds=[0,1]",
        "env.phase_length=3", "name=llm_run", "llm=local", "llm.scoring=logprobs", f"llm.base_url={base_url}",
        f"llm.api_key_env={KEY_ENV}", f"llm.cache_path={cache}", f"results_dir={results}", "progress=false",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, KEY_ENV: SENTINEL, "PYTHONPATH": str(PROJECT_ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=results.parent, env=env, timeout=900)
    return proc, time.perf_counter() - start


def episodes(results: Path) -> list[dict]:
    """Every stream's episodes, in a fixed order (method, seed, t)."""
    rows = []
    for path in sorted(results.glob(f"runs/llm_run/controlled_drift/**/seed=*/{EPISODES}")):
        rows += pq.read_table(path).to_pylist()
    return rows


def backend_stats(results: Path) -> dict[str, dict]:
    """Each method's backend counters when the run ended. Its seeds share one backend, and each stream's
    meta.json holds the counts when that stream finished (another stream's call may be in flight): the
    counters only grow, so the largest are the run's."""
    stats: dict[str, dict] = {}
    for path in results.glob(f"runs/llm_run/controlled_drift/**/{META}"):
        meta = json.loads(path.read_text())
        assert meta["complete"] and meta["n_episodes"] == EPISODES_PER_STREAM
        current = stats.get(meta["memory"])
        if current is None or _progress(meta["backend_stats"]) > _progress(current):
            stats[meta["memory"]] = meta["backend_stats"]
    assert sorted(stats) == sorted(METHODS)
    return stats


def _progress(stats: dict) -> tuple[int, ...]:
    return stats["calls"], stats["requests"], stats["prompt_tokens"], stats["cache_hits"]


def without(rows: list[dict], *columns: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in columns} for r in rows]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llm_run")


@pytest.fixture(scope="module")
def counting_proxy(llm_server) -> FaultProxy:
    """A pass-through proxy in front of the real server: it only counts the requests that reach it."""
    with FaultProxy(llm_server) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def cold(workdir, counting_proxy) -> Run:
    results = workdir / "cold"
    proc, seconds = run(results, counting_proxy.base_url, results / "llm_cache.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert counting_proxy.last_authorization == f"Bearer {SENTINEL}"  # the key is used
    return Run(results, proc, seconds, counting_proxy.upstream_requests)


def test_the_run_completes_and_logs_the_endpoints_usage_and_latency(cold):
    rows = episodes(cold.results)
    assert len(rows) == len(METHODS) * len(SEEDS) * EPISODES_PER_STREAM
    streams = {(r["memory"], r["seed"]) for r in rows}
    assert streams == {(m, s) for m in METHODS for s in SEEDS}
    for memory, seed in streams:
        assert [r["t"] for r in rows if (r["memory"], r["seed"]) == (memory, seed)] == list(range(12))
    assert all(r["error"] == "" and r["parse_ok"] for r in rows)
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in rows)
    assert all(r["latency"] > 0 for r in rows if not r["cached"])
    # append-only prompts grow with what they carry: more evidence, more prompt tokens
    grown = [r for r in rows if r["memory"] == "append_only" and r["seed"] == 0]
    assert (
        grown[-1]["n_evidence"] > grown[0]["n_evidence"]
        and grown[-1]["prompt_tokens"] > grown[0]["prompt_tokens"]
    )
    for memory, stats in backend_stats(cold.results).items():
        assert stats["failed_calls"] == 0 and stats["logprob_fallbacks"] == 0
        # the tokens logged per episode are the endpoint's usage the backend counted for its fresh calls
        fresh = [r for r in rows if r["memory"] == memory and not r["cached"]]
        assert sum(r["prompt_tokens"] for r in fresh) == stats["prompt_tokens"]
    calls = sum(stats["requests"] for stats in backend_stats(cold.results).values())
    assert cold.upstream_requests == calls > 0
    print(
        f"\ncold: {len(rows)} episodes ({calls} model calls) in {cold.seconds:.1f} s = "
        f"{len(rows) / cold.seconds:.2f} episodes/s through the runner"
    )


def test_a_rerun_makes_no_server_call_and_writes_identical_episodes(cold, workdir, counting_proxy):
    same, _ = run(cold.results, counting_proxy.base_url, cold.results / "llm_cache.sqlite")
    assert same.returncode == 0, same.stderr
    assert counting_proxy.upstream_requests == cold.upstream_requests  # complete streams are skipped

    fresh = workdir / "warm"  # a fresh results_dir: every stream runs again, from the cold run's cache
    proc, seconds = run(fresh, counting_proxy.base_url, cold.results / "llm_cache.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert counting_proxy.upstream_requests == cold.upstream_requests
    assert all(stats["requests"] == 0 for stats in backend_stats(fresh).values())
    warm_rows = episodes(fresh)
    assert all(r["cached"] for r in warm_rows)
    assert without(warm_rows, "latency", "cached") == without(episodes(cold.results), "latency", "cached")
    print(
        f"\nwarm (cache): the same {len(warm_rows)} episodes in {seconds:.1f} s (cold {cold.seconds:.1f} s)"
    )


def test_injected_faults_lose_nothing_and_change_no_answer(cold, workdir, llm_server):
    """10% of each fault kind (429 with Retry-After, 500, hang past the timeout, truncated body, garbage
    JSON) between the backend and the server, and a cache of its own: every episode is there once, with
    the fault-free run's decisions."""
    results = workdir / "faulty"
    retry = ("llm.timeout=6", "llm.max_retries=20", "llm.backoff_base=0.1", "llm.backoff_max=1.0")
    with FaultProxy(llm_server, FaultRates.uniform(0.1), seed=5, retry_after="0.2", hang_seconds=7) as proxy:
        proc, seconds = run(results, proxy.base_url, results / "llm_cache.sqlite", *retry)
    assert proc.returncode == 0, proc.stderr
    assert set(proxy.counts) == {"forwarded", "rate_limited", "server_error", "hang", "truncated", "garbage"}
    rows = episodes(results)
    keys = [(r["memory"], r["seed"], r["t"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(episodes(cold.results))  # none lost, none duplicated
    assert all(r["error"] == "" for r in rows)
    decisions = [{k: r[k] for k in DECISIONS} for r in rows]
    assert decisions == [{k: r[k] for k in DECISIONS} for r in episodes(cold.results)]
    stats = backend_stats(results).values()
    assert sum(s["retries"] for s in stats) >= sum(n for k, n in proxy.counts.items() if k != "forwarded")
    assert all(s["failed_calls"] == 0 for s in stats)
    print(f"\nfaulty: {len(rows)} episodes in {seconds:.1f} s; proxy {dict(sorted(proxy.counts.items()))}")


def test_the_api_key_is_never_written(cold, workdir):
    """Every file the runs wrote (results, Hydra's output dirs, the caches) is free of the key."""
    written = [p for p in workdir.rglob("*") if p.is_file()]
    assert any(".hydra" in p.parts for p in written) and any(p.name == "llm_cache.sqlite" for p in written)
    assert len(written) > 30
    assert [str(p) for p in written if SENTINEL.encode() in p.read_bytes()] == []


def test_local_llm_serves_while_a_command_runs_and_exits_with_its_code(llm_server):
    port = free_port()
    probe = (
        "import sys, urllib.request; "
        f"r = urllib.request.urlopen('http://127.0.0.1:{port}/v1/models', timeout=10); "
        "sys.exit(3 if r.status == 200 else 1)"
    )
    serve = [sys.executable, "-m", "runners.llm.local.serve", "--port", str(port)]
    proc = subprocess.run(
        [*serve, "--", sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stderr  # the command's own code: it found the server up
    assert not port_in_use(port)  # and the server is gone
    busy = llm_server.rsplit(":", 1)[1].split("/")[0]
    proc = subprocess.run([*serve[:-1], busy, "--", "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and f"port {busy} is in use" in proc.stderr
