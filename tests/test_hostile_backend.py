"""An untrusted endpoint against the openai backend: `Retry-After: 100000` once held a call for 120 s
whatever `backoff_max` said (about 2 hours of waiting per run with the defaults), 3 MB replies were
stored whole, negative token counts were accepted, and unparseable replies cached from a broken
endpoint were served to a later run against a working one."""

from __future__ import annotations

import sqlite3
import time

import pyarrow.parquet as pq
import pytest

from runners.llm.backend import BackendExhausted, Request
from runners.llm.openai_backend import OpenAIBackend
from runners.llm.response_cache import ResponseCache
from tests.helpers.hostile import run
from tests.helpers.stub_server import StubReply, StubServer, completion
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
