"""An untrusted endpoint against the openai backend: `Retry-After: 100000` once held a call for 120 s
whatever `backoff_max` said (about 2 hours of waiting per run with the defaults), 3 MB replies were
stored whole, negative token counts were accepted, and unparseable replies cached from a broken
endpoint were served to a later run against a working one; a body trickled a byte at a time held one
call for 31 s past a 2 s timeout, a 300 MB body was read whole, malformed top_logprobs crashed the
run, concurrent streams spent 4004 tokens of a budget of 1500, and after a resume meta.json counted
only the last invocation's tokens and cost."""

from __future__ import annotations

import json
import random
import sqlite3
import time

import pyarrow.parquet as pq
import pytest

from runners.llm.backend import BackendExhausted, Request
from runners.llm.capped_transport import MAX_BODY_BYTES
from runners.llm.openai_backend import OpenAIBackend, backoff_delay, planned_cost
from runners.llm.response_cache import ResponseCache
from runners.run import RunStopped
from tests.helpers.hostile import run
from tests.helpers.stub_server import StubReply, StubServer, completion, echoed
from tests.test_openai_backend import run as ask

MESSAGES = ({"role": "user", "content": "Key 7: A, B or C?"},)


def test_a_huge_retry_after_waits_no_longer_than_backoff_max(stub_server):
    stub_server.push(StubReply(status=429, headers={"Retry-After": "100000"}))
    backend = OpenAIBackend(stub_server.base_url, "m", backoff_base=0.01, backoff_max=0.2)
    start = time.perf_counter()
    (reply,) = ask(backend, Request(MESSAGES))
    assert reply.error is None and time.perf_counter() - start < 5
    assert backend.stats()["retry_wait_s"] == 0.2  # retry_after_max defaults to backoff_max


def test_the_time_a_run_loses_to_a_failing_endpoint_is_bounded(stub_server):
    stub_server.default = StubReply(status=503, headers={"Retry-After": "30"})
    backend = OpenAIBackend(
        stub_server.base_url, "m", max_retries=50, max_failed_calls=1000, retry_after_max=0.1,
        max_retry_wait=0.5,
    )  # fmt: skip
    start = time.perf_counter()
    with pytest.raises(BackendExhausted, match="max_retry_wait=0.5 s"):
        ask(backend, *(Request(MESSAGES, seed=i) for i in range(4)))
    assert time.perf_counter() - start < 5
    assert backend.stats()["retry_wait_s"] <= 0.5


def test_a_huge_reply_is_cut_before_logging_and_caching_and_flagged(tmp_path):
    stub = StubServer().start()
    try:
        stub.default = StubReply(body=completion("Answer: A " + "x" * 3_000_000))
        results = tmp_path / "results"
        run(results, "llm=openai", "llm.model=m", f"llm.base_url={stub.base_url}", "llm.max_reply_chars=100")
    finally:
        stub.stop()
    (episodes,) = results.rglob("episodes.parquet")
    table = pq.read_table(episodes).to_pydict()
    assert all(table["truncated"]) and max(map(len, table["reply"])) == 100
    assert all(a for a in table["action"])  # the answer at the start still parses
    cache = results / "llm_cache.sqlite"
    assert cache.stat().st_size < 100_000


def test_impossible_token_counts_are_treated_as_missing(stub_server):
    body = completion("Answer: B")
    body["usage"] = {"prompt_tokens": -5, "completion_tokens": 10**15}
    stub_server.push(StubReply(body=body))
    (reply,) = ask(OpenAIBackend(stub_server.base_url, "m"), Request(MESSAGES))
    assert reply.prompt_tokens > 0 and reply.completion_tokens == 3  # estimated: len("Answer: B") / 4


def test_an_unparseable_reply_cached_from_one_endpoint_is_not_served_for_another(tmp_path):
    broken, working = StubServer().start(), StubServer().start()
    try:
        broken.default = StubReply(body=completion("<html>502 bad gateway</html>"))
        cache = tmp_path / "cache.sqlite"
        requests = [Request(MESSAGES, seed=i) for i in range(8)]
        ask(OpenAIBackend(broken.base_url, "m", cache_path=cache), *requests)
        later = OpenAIBackend(working.base_url, "m", cache_path=cache)
        replies = ask(later, *requests)
    finally:
        broken.stop()
        working.stop()
    assert len(working.requests) == 8 and later.stats()["cache_hits"] == 0
    assert all(r.text == "Answer: A" for r in replies)


def test_a_cache_file_from_before_the_reply_limit_still_opens(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE replies (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL, "
            "prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)"
        )
        conn.execute("INSERT INTO replies VALUES ('k', 'm', 'Answer: A', 1, 2)")
    cache = ResponseCache(path)
    hit = cache.get("k")
    assert (hit.text, hit.truncated) == ("Answer: A", False)
    cache.put("k2", "m", "Answer: B", 1, 2, truncated=True)
    assert cache.get("k2").truncated is True
    cache.close()


# --- a slow, flooding or garbled endpoint ---------------------------------------------------------


def test_a_slow_loris_endpoint_is_cut_off_at_the_timeout(stub_server):
    stub_server.default = StubReply(trickle=0.1)  # about 20 s for the whole body, one byte at a time
    backend = OpenAIBackend(stub_server.base_url, "m", timeout=1.0, max_retries=0)
    start = time.perf_counter()
    (reply,) = ask(backend, Request(MESSAGES))
    assert time.perf_counter() - start < 3
    assert "no complete answer within 1 s" in reply.error and backend.stats()["faults"] == {"timeout": 1}


def test_a_slow_loris_endpoint_counts_against_max_retry_wait(stub_server):
    stub_server.default = StubReply(trickle=0.1)
    backend = OpenAIBackend(
        stub_server.base_url, "m", timeout=0.5, max_retries=50, backoff_base=0.01, backoff_max=0.01,
        max_retry_wait=1.2,
    )  # fmt: skip
    start = time.perf_counter()
    with pytest.raises(BackendExhausted, match="max_retry_wait=1.2 s"):
        ask(backend, Request(MESSAGES))
    assert time.perf_counter() - start < 3


def test_a_flood_of_a_reply_is_read_no_further_than_the_body_limit(stub_server):
    stub_server.default = StubReply(flood=300 << 20)
    backend = OpenAIBackend(stub_server.base_url, "m", max_retries=0, timeout=30)
    (reply,) = ask(backend, Request(MESSAGES))
    assert f"longer than {MAX_BODY_BYTES} bytes" in reply.error
    assert backend.stats()["faults"] == {"oversized": 1}
    time.sleep(0.2)  # the server notices the closed connection at its next write
    assert stub_server.flooded < 3 * MAX_BODY_BYTES


def test_a_reply_declaring_a_huge_length_or_compressed_unasked_is_refused_before_its_body(stub_server):
    stub_server.push(
        StubReply(headers={"Content-Encoding": "gzip"}),
        StubReply(status=500, headers={"Content-Encoding": "br"}),
    )
    backend = OpenAIBackend(stub_server.base_url, "m", max_retries=1, backoff_base=0, backoff_max=0)
    (reply,) = ask(backend, Request(MESSAGES))
    assert "compressed (br) although none was asked for" in reply.error
    assert stub_server.headers[0]["accept-encoding"] == "identity"


@pytest.mark.parametrize("entries", [[None, "B", 3, ["B", -0.1]], [{"token": None}, {"logprob": "x"}]])
def test_malformed_top_logprobs_entries_are_skipped_not_fatal(stub_server, entries):
    body = completion("B", top_logprobs=[("B", -0.1)])
    body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = [*entries, {"token": "C", "logprob": -0.5}]
    stub_server.push(StubReply(body=body))
    backend = OpenAIBackend(stub_server.base_url, "m", scoring="logprobs")
    (reply,) = ask(backend, Request(MESSAGES, labels=("A", "B", "C")))
    assert reply.text == "Answer: C" and reply.error is None


def test_max_retries_beyond_the_float_range_of_backoff_retries_without_overflow(stub_server):
    # The retry loop uses an attempt's number only in backoff_delay: the waits past 2.0**1024 are checked
    # there, the loop with a few real retries (1,100 of them took a minute of the suite).
    rng = random.Random(0)
    for attempt in (1023, 1024, 1100, 10**6):
        assert 2.0 <= backoff_delay(attempt, 0.5, 4.0, rng) <= 4.0
    stub_server.script.extend(StubReply(status=503) for _ in range(30))
    backend = OpenAIBackend(stub_server.base_url, "m", max_retries=1200, backoff_base=0, backoff_max=0)
    (reply,) = ask(backend, Request(MESSAGES))
    assert reply.error is None and backend.stats()["retries"] == 30


def test_a_cache_file_that_is_no_database_stops_the_run_with_one_line(tmp_path):
    path = tmp_path / "llm_cache.sqlite"
    path.write_bytes(b"this is not SQLite " * 100)
    with pytest.raises(
        ValueError, match=rf"^cache_path={path}: not a usable reply cache \(file is not a database"
    ):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", cache_path=path)


# --- the token budget under concurrent streams ----------------------------------------------------


@pytest.mark.parametrize("scoring", ["text", "loglik"])
def test_concurrent_calls_overshoot_the_token_budget_by_less_than_one_calls_reservation(stub_server, scoring):
    """40 calls at once against a budget of 300 tokens: each reserves its prompt (estimated, as this stub
    reports no usage) plus max_tokens before it is sent."""
    if scoring == "loglik":
        stub_server.respond = lambda body: StubReply(body=echoed(body, favour="B"), delay=0.05)
        requests = [Request(MESSAGES, seed=i, labels=("A", "B"), options=("A", "B")) for i in range(40)]
    else:
        stub_server.default = StubReply(body=completion("Answer: A", usage=False), delay=0.05)
        requests = [Request(MESSAGES, seed=i) for i in range(40)]
    backend = OpenAIBackend(stub_server.base_url, "m", scoring=scoring, max_tokens=8, max_total_tokens=300)
    with pytest.raises(BackendExhausted, match=r"llm\.max_total_tokens=300 spent"):
        ask(backend, *requests)
    _, prompt, completion_bound = planned_cost(requests[0], scoring, 8)
    stats = backend.stats()
    spent = stats["prompt_tokens"] + stats["completion_tokens"]
    assert 300 - (prompt + completion_bound) <= spent < 300 + prompt + completion_bound, spent


def test_after_a_resume_meta_json_totals_the_tokens_and_cost_of_every_invocation(tmp_path, stub_server):
    stub_server.default = StubReply(body=completion("Answer: A"))  # 11 prompt + 3 completion tokens a call
    results = tmp_path / "results"
    llm = (
        "llm=openai",
        "llm.model=m",
        f"llm.base_url={stub_server.base_url}",
        "llm.price_in=1",
        "llm.price_out=2",
    )
    with pytest.raises(RunStopped, match=r"llm\.max_total_tokens=50 spent"):
        run(results, *llm, "llm.max_total_tokens=50")  # 4 calls of the 8 episodes
    first = len(stub_server.requests)
    run(results, *llm)
    (meta,) = [json.loads(p.read_text()) for p in results.rglob("meta.json")]
    calls = len(stub_server.requests)
    assert first == 4 and calls == 8 and meta["replayed"] == 4
    stats = meta["backend_stats"]
    assert (stats["requests"], stats["prompt_tokens"], stats["completion_tokens"]) == (8, 88, 24)
    assert stats["cost"] == pytest.approx((88 * 1 + 24 * 2) / 1e6)
    assert not list(results.rglob("*.partial.*"))
