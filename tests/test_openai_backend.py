"""Unit tests of the openai backend against a scripted local stub endpoint (no model needed)."""

import asyncio
import email.utils
import json
import pickle
import random
import time

import pytest

from runners.agent.prompt import count_message_tokens, estimate_tokens
from runners.llm.backend import Backend, Request
from runners.llm.openai_backend import (
    MAX_RETRY_AFTER,
    BackendExhausted,
    OpenAIBackend,
    backoff_delay,
    parse_retry_after,
    pick_label,
)
from tests.helpers.fault_proxy import FaultProxy, FaultRates
from tests.helpers.stub_server import StubReply, completion

SENTINEL = "sk-test-SENTINEL-0123456789abcdef"
MESSAGES = (
    {"role": "system", "content": "Pick one option."},
    {"role": "user", "content": "Key 7: A, B or C?"},
)
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "timeout": 2.0}


def make(stub, **kwargs) -> OpenAIBackend:
    return OpenAIBackend(base_url=stub.base_url, model="stub-model", **{**FAST, **kwargs})


def run(backend, *requests):
    async def go():
        try:
            return await asyncio.gather(*(backend.complete(r) for r in requests))
        finally:
            await backend.aclose()

    return asyncio.run(go())


def request(seed: int = 0, labels: tuple[str, ...] = ()) -> Request:
    return Request(messages=MESSAGES, seed=seed, labels=labels)


# --- pure helpers ---------------------------------------------------------------------------------


def test_parse_retry_after_seconds_and_dates():
    now = 1_700_000_000.0
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after(" 0.5 ", now) == 0.5
    assert parse_retry_after(email.utils.formatdate(now + 7, usegmt=True), now) == pytest.approx(7.0)
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0
    assert parse_retry_after("100000", now) == MAX_RETRY_AFTER
    assert parse_retry_after("-4", now) == 0.0
    for bad in (None, "", "soon", "nan"):
        assert parse_retry_after(bad, now) is None


def test_backoff_is_exponential_jittered_capped_and_yields_to_retry_after():
    rng = random.Random(0)
    for attempt in range(8):
        delay = backoff_delay(attempt, 0.5, 4.0, rng)
        ceiling = min(4.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert len({backoff_delay(2, 0.5, 4.0, rng) for _ in range(20)}) > 1  # jitter
    assert backoff_delay(0, 0.5, 4.0, rng, retry_after=9.0) == 9.0


def test_pick_label_and_token_estimate():
    top = [
        {"token": "Answer", "logprob": -0.1},
        {"token": " B", "logprob": -1.0},
        {"token": "A.", "logprob": -2.0},
    ]
    assert pick_label(top, ("A", "B", "C")) == "B"
    assert pick_label(top, ("C",)) is None
    assert estimate_tokens([{"role": "user", "content": "x" * 40}]) == 14


@pytest.mark.parametrize(
    "param, value",
    [
        ("base_url", "not-a-url"),
        ("model", ""),
        ("temperature", -0.1),
        ("max_tokens", 0),
        ("top_p", 1.5),
        ("timeout", 0),
        ("max_retries", -1),
        ("max_concurrency", 0),
        ("max_failed_calls", 0),
        ("scoring", "vibes"),
    ],
)
def test_bad_parameters_are_named(param, value):
    kwargs = {"base_url": "http://127.0.0.1:1/v1", "model": "m", param: value}
    with pytest.raises(ValueError, match=param):
        OpenAIBackend(**kwargs)


def test_remote_endpoint_needs_its_key_local_one_does_not(monkeypatch):
    monkeypatch.delenv("TEPA_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="api_key_env.*TEPA_TEST_KEY"):
        OpenAIBackend("https://api.example.invalid/v1", "m", api_key_env="TEPA_TEST_KEY")
    assert isinstance(OpenAIBackend("http://localhost:8080/v1", "m", api_key_env="TEPA_TEST_KEY"), Backend)


# --- calls against the stub -----------------------------------------------------------------------


def test_key_is_sent_but_never_in_repr_stats_pickle_or_errors(stub_server, monkeypatch, tmp_path):
    monkeypatch.setenv("TEPA_TEST_KEY", SENTINEL)
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {SENTINEL}"}}).encode()
    stub_server.push(StubReply(), StubReply(status=401, body=echo))
    backend = make(
        stub_server, api_key_env="TEPA_TEST_KEY", cache_path=tmp_path / "c.sqlite", max_concurrency=1
    )
    ok, denied = run(backend, request(0), request(1))
    assert ok.error is None and denied.error is not None and denied.text == ""
    assert stub_server.headers[0]["authorization"] == f"Bearer {SENTINEL}"
    for text in (repr(backend), json.dumps(backend.stats()), denied.error, str(vars(backend))):
        assert SENTINEL not in text
    assert SENTINEL.encode() not in pickle.dumps(backend)
    assert all(SENTINEL.encode() not in p.read_bytes() for p in tmp_path.iterdir())


def test_reply_carries_usage_or_an_estimate(stub_server):
    stub_server.push(
        StubReply(body=completion("Answer: C")), StubReply(body=completion("Answer: C", usage=False))
    )
    reported, estimated = run(make(stub_server, max_concurrency=1), request(0), request(1))
    assert (reported.text, reported.prompt_tokens, reported.completion_tokens) == ("Answer: C", 11, 3)
    assert estimated.prompt_tokens == count_message_tokens(MESSAGES) and estimated.completion_tokens == 3
    assert reported.latency > 0 and not reported.cached
    sent = stub_server.requests[0]
    assert sent["temperature"] == 0 and sent["max_tokens"] == 64 and sent["seed"] == 0


@pytest.mark.parametrize(
    "fault, kind",
    [
        (StubReply(status=500), "http_500"),
        (StubReply(status=503), "http_503"),
        (StubReply(status=429), "rate_limited"),
        (StubReply(body=b'{"choices": [{"mess'), "malformed"),
        (StubReply(body=b"<html>bad gateway</html>"), "malformed"),
        (StubReply(body={"object": "chat.completion", "choices": []}), "malformed"),
        (StubReply(delay=2.0), "timeout"),
    ],
)
def test_transient_failures_are_retried(stub_server, fault, kind):
    stub_server.push(fault, fault)
    backend = make(stub_server, timeout=0.75 if kind == "timeout" else 5.0)
    (reply,) = run(backend, request())
    assert reply.error is None and reply.text == "Answer: A"
    stats = backend.stats()
    assert stats["retries"] == 2 and stats["faults"] == {kind: 2} and stats["requests"] == 3


def test_retry_after_is_honoured_up_to_retry_after_max(stub_server):
    stub_server.push(StubReply(status=429, headers={"Retry-After": "0.6"}))
    backend = make(stub_server, retry_after_max=1.0)
    start = time.perf_counter()
    (reply,) = run(backend, request())
    assert reply.error is None and time.perf_counter() - start >= 0.6
    assert backend.stats()["retry_wait_s"] == 0.6


def test_permanent_errors_fail_at_once(stub_server):
    stub_server.push(StubReply(status=400, body={"error": {"message": "bad model"}}))
    backend = make(stub_server)
    (reply,) = run(backend, request())
    assert reply.text == "" and "HTTP 400" in reply.error
    assert backend.stats()["requests"] == 1 and backend.stats()["failed_calls"] == 1


def test_gives_up_after_max_retries_then_exhausts(stub_server, tmp_path):
    stub_server.default = StubReply(status=500)
    backend = make(stub_server, max_retries=2, max_failed_calls=2, cache_path=tmp_path / "c.sqlite")

    async def go():
        first = await backend.complete(request(0))
        with pytest.raises(BackendExhausted):
            await backend.complete(request(1))
        with pytest.raises(BackendExhausted):  # and stays exhausted, without touching the network
            await backend.complete(request(2))
        await backend.aclose()
        return first

    first = asyncio.run(go())
    assert "gave up after 3 attempts" in first.error and first.text == ""
    assert len(stub_server.requests) == 6
    assert len(backend.cache) == 0  # failures are never cached


def test_cache_serves_reruns_for_free_on_the_same_endpoint_only(stub_server, tmp_path):
    cache = tmp_path / "c.sqlite"
    first = make(stub_server, cache_path=cache)
    (a, b) = run(first, request(0), request(1))
    second = make(stub_server, cache_path=cache)
    (a2, b2, c2) = run(second, request(0), request(1), request(2))
    assert (a2.text, a2.prompt_tokens, a2.cached) == (a.text, a.prompt_tokens, True) and b2.cached
    assert not c2.cached  # another seed is another generation parameter
    assert len(stub_server.requests) == 3
    assert (second.stats()["cache_hits"], second.stats()["cache_misses"]) == (2, 1)
    # the same server under another URL is another endpoint: asked afresh
    third = OpenAIBackend(
        stub_server.base_url.replace("127.0.0.1", "localhost"), "stub-model", cache_path=cache
    )
    (a3,) = run(third, request(0))
    assert not a3.cached and len(stub_server.requests) == 4


def test_concurrency_is_limited_by_one_semaphore(stub_server):
    stub_server.default = StubReply(delay=0.15)
    backend = make(stub_server, max_concurrency=2)
    replies = run(backend, *(request(i) for i in range(6)))
    assert all(r.error is None for r in replies)
    assert stub_server.max_in_flight == 2


def test_backend_survives_a_new_event_loop(stub_server):
    backend = make(stub_server)
    assert run(backend, request(0))[0].error is None
    assert run(backend, request(1))[0].error is None


def test_logprob_scoring_picks_the_most_likely_label(stub_server):
    top = [("Answer", -0.2), (" C", -0.9), ("B", -1.5), ("A", -3.0)]
    stub_server.push(StubReply(body=completion("Answer", top_logprobs=top)))
    backend = make(stub_server, scoring="logprobs")
    (reply,) = run(backend, request(labels=("A", "B", "C")))
    assert reply.text == "Answer: C"
    sent = stub_server.requests[0]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5 and sent["max_tokens"] == 1
    assert "A, B, C" in sent["messages"][-1]["content"]


def test_logprob_scoring_falls_back_to_free_text(stub_server):
    stub_server.push(StubReply(body=completion("B")), StubReply(body=completion("I think Answer: B")))
    backend = make(stub_server, scoring="logprobs")
    (reply,) = run(backend, request(labels=("A", "B")))
    assert reply.text == "I think Answer: B" and reply.prompt_tokens == 22
    assert backend.stats()["logprob_fallbacks"] == 1
    assert "logprobs" not in stub_server.requests[1] and stub_server.requests[1]["messages"] == list(MESSAGES)


def test_logprob_scoring_survives_an_endpoint_that_rejects_it(stub_server):
    stub_server.push(StubReply(status=400, body={"error": {"message": "logprobs not supported"}}))
    backend = make(stub_server, scoring="logprobs")
    (reply,) = run(backend, request(labels=("A", "B")))
    assert reply.error is None and reply.text == "Answer: A"
    assert backend.stats()["logprob_fallbacks"] == 1 and len(stub_server.requests) == 2


def test_faults_through_the_proxy_leave_answers_unchanged(stub_server):
    """Every fault kind at 10% through the fault proxy: all calls complete, identical to the stub's."""
    stub_server.default = StubReply(body=completion("Answer: B"))
    rates = FaultRates.uniform(0.1)
    with FaultProxy(stub_server.base_url, rates, seed=3, retry_after="0.05", hang_seconds=1.5) as proxy:
        backend = OpenAIBackend(proxy.base_url, "stub-model", **{**FAST, "timeout": 0.5}, max_retries=12)
        replies = run(backend, *(request(i) for i in range(40)))
    assert [r.text for r in replies] == ["Answer: B"] * 40
    assert set(proxy.counts) == {"forwarded", "rate_limited", "server_error", "hang", "truncated", "garbage"}
    stats = backend.stats()
    assert stats["failed_calls"] == 0 and stats["retries"] == sum(stats["faults"].values())
    assert proxy.upstream_requests == proxy.counts["forwarded"] + proxy.counts["truncated"]
