"""The openai backend against a REAL model: SmolLM2-135M-Instruct behind llama.cpp's server (make test-llm).

Skipped, with the reason, when the local-llm extra is not installed."""

import asyncio
import json
import pickle
import time

import pytest

from runners.llm.backend import Request
from runners.llm.local_llm import MODEL_ALIAS
from runners.llm.openai_backend import OpenAIBackend
from tests.helpers.fault_proxy import FaultProxy, FaultRates

pytestmark = pytest.mark.llm

SENTINEL = "sk-SENTINEL-never-write-me-4242"
LABELS = ("A", "B", "C")
SYSTEM = "You are an agent that picks one option. Reply with 'Answer: X', where X is the option's label."


def prompt(i: int) -> Request:
    """A decision prompt like the agent loop's, different for every i."""
    user = (
        f"Task {i}: choose the tool that opens archive type {i % 7}.\n"
        "Options:\nA) tar -xf\nB) unzip\nC) 7z x\n"
        f"Memory:\n- for archive type {i % 7}, option {LABELS[i % 3]} worked at t={i}\n"
        "Which option?"
    )
    return Request(
        messages=({"role": "system", "content": SYSTEM}, {"role": "user", "content": user}), seed=i
    )


def backend(base_url: str, **kwargs) -> OpenAIBackend:
    settings = {"max_tokens": 16, "timeout": 30.0, "max_concurrency": 4, "backoff_base": 0.1}
    return OpenAIBackend(base_url, MODEL_ALIAS, **{**settings, **kwargs})


def run(llm: OpenAIBackend, requests: list[Request]):
    async def go():
        try:
            return await asyncio.gather(*(llm.complete(r) for r in requests))
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_completions_work(llm_server):
    llm = backend(llm_server)
    (reply,) = run(llm, [prompt(0)])
    assert reply.error is None and reply.text.strip()
    assert reply.prompt_tokens > 40 and 1 <= reply.completion_tokens <= 16  # the server's usage
    assert llm.stats()["requests"] == 1


def test_cache_makes_a_second_identical_call_free(llm_server, tmp_path):
    batch = [prompt(i) for i in range(4)]
    with FaultProxy(llm_server) as proxy:  # pass-through: it only counts
        first = run(backend(proxy.base_url, cache_path=tmp_path / "cache.sqlite"), batch)
        assert proxy.upstream_requests == 4
        again = backend(proxy.base_url, cache_path=tmp_path / "cache.sqlite")
        second = run(again, batch)
        assert proxy.upstream_requests == 4
    assert [r.text for r in second] == [r.text for r in first] and all(r.cached for r in second)
    assert [r.prompt_tokens for r in second] == [r.prompt_tokens for r in first]
    assert (again.stats()["cache_hits"], again.stats()["cache_misses"]) == (4, 0)


def test_injected_faults_leave_the_answers_unchanged(llm_server, tmp_path):
    """10% of each fault kind (429, 500, hang, truncated, garbage): every call completes, equal to the
    fault-free answers; a rerun through the same faults is then served from the cache."""
    batch = [prompt(i) for i in range(8)]
    reference = [r.text for r in run(backend(llm_server), batch)]
    rates = FaultRates.uniform(0.1)
    # the server answers one request at a time: 2 callers keep it busy without queueing into the timeout
    limits = {"timeout": 6.0, "max_concurrency": 2, "cache_path": tmp_path / "c.sqlite"}
    # seed 12 draws every fault kind within its first 10 requests (8 answers need more than 10)
    with FaultProxy(llm_server, rates, seed=12, retry_after="1", hang_seconds=9.0) as proxy:
        faulty = backend(proxy.base_url, max_retries=12, **limits)
        replies = run(faulty, batch)
        upstream = proxy.upstream_requests
        rerun = run(backend(proxy.base_url, **limits), batch)
        assert proxy.upstream_requests == upstream
    assert [r.error for r in replies] == [None] * 8
    assert [r.text for r in replies] == reference == [r.text for r in rerun]
    assert set(proxy.counts) == {"forwarded", "rate_limited", "server_error", "hang", "truncated", "garbage"}
    injected = sum(n for kind, n in proxy.counts.items() if kind != "forwarded")
    stats = faulty.stats()
    assert stats["retries"] >= injected and stats["failed_calls"] == 0  # + slow answers


def test_api_key_is_never_written(llm_server, tmp_path, monkeypatch):
    monkeypatch.setenv("TEPA_LLM_TEST_KEY", SENTINEL)
    with FaultProxy(llm_server, FaultRates(server_error=0.3), seed=1) as proxy:
        llm = backend(proxy.base_url, api_key_env="TEPA_LLM_TEST_KEY", cache_path=tmp_path / "c.sqlite")
        replies = run(llm, [prompt(i) for i in range(3)])
        assert proxy.last_authorization == f"Bearer {SENTINEL}"  # the key is used ...
    (tmp_path / "meta.json").write_text(json.dumps({"backend": repr(llm), "stats": llm.stats()}))
    rows = [{"text": r.text, "error": r.error, "tokens": r.prompt_tokens} for r in replies]
    (tmp_path / "episodes.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    (tmp_path / "backend.pkl").write_bytes(pickle.dumps(llm))
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 4
    assert [p.name for p in written if SENTINEL.encode() in p.read_bytes()] == []  # ... and never written


def test_logprob_scoring_returns_a_valid_label(llm_server):
    llm = backend(llm_server, scoring="logprobs")
    replies = run(llm, [Request(p.messages, p.seed, LABELS) for p in map(prompt, range(3))])
    assert all(r.text in {f"Answer: {label}" for label in LABELS} for r in replies)
    assert llm.stats()["logprob_fallbacks"] == 0 and all(r.completion_tokens == 1 for r in replies)


@pytest.mark.slow
def test_throughput_and_cache_timing(llm_server, tmp_path, capsys):
    """Requests per second with 1, 4 and 16 concurrent callers (16 distinct uncached prompts of ~90 tokens,
    up to 16 answer tokens each), and one batch cold vs warm; printed for the record."""
    lines = []
    for concurrency, offset in ((1, 100), (4, 200), (16, 300)):
        llm = backend(llm_server, max_concurrency=concurrency, timeout=120.0)
        start = time.perf_counter()
        replies = run(llm, [prompt(offset + i) for i in range(16)])
        elapsed = time.perf_counter() - start
        assert all(r.error is None for r in replies)
        lines.append(f"concurrency {concurrency:>2}: {16 / elapsed:.2f} requests/s")
    batch = [prompt(400 + i) for i in range(8)]
    timings = []
    for _ in ("cold", "warm"):
        start = time.perf_counter()
        run(backend(llm_server, cache_path=tmp_path / "c.sqlite"), batch)
        timings.append(time.perf_counter() - start)
    lines.append(f"8-call batch: cold {timings[0]:.2f} s, warm (cached) {timings[1]:.3f} s")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert timings[1] < timings[0] / 5
