"""The `openai` backend: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp, Ollama).

Why it looks the way it does:
- Retries are our own loop (the SDK's are switched off), so what is retried, how long we wait and how often
  it happened are explicit, testable and reported in `stats()`. Transient: HTTP 408/409/429/5xx, timeouts,
  connection errors, and bodies that are not a chat completion (malformed JSON, no choices). Anything else
  (400, 401, 404, ...) fails the call at once.
- A call that fails for good is a `Reply` with `error` set, so the episode is logged and scored; after
  `max_failed_calls` of them the endpoint is presumed down and `BackendExhausted` is raised so the run stops
  cleanly and resumes later instead of logging hundreds of empty answers.
- The API key is read from the environment variable *named* by `api_key_env` when a client is made and is
  never kept on this object: `repr()`, `stats()` and pickling never contain it. An endpoint may echo it
  (in a reply or an error): its value and anything shaped like a key (`tepa.redact`) are
  scrubbed from both where they are received; a reply that had to be scrubbed is never cached.
- The endpoint is not trusted: an attempt must end within `timeout` as a whole (the client's own timeout is
  per read, which a body trickled a byte at a time never trips); a body is read up to
  `runners.llm.capped_transport.MAX_BODY_BYTES`, uncompressed; one wait for a retry is at most
  `retry_after_max` (default `backoff_max`), whatever Retry-After says; the time a run spends on failed
  attempts and retry waits together is at most `max_retry_wait` (plus the attempts in flight, each at most
  `timeout`), after which the run stops (BackendExhausted) and a rerun resumes it; replies longer than
  `max_reply_chars` are cut (and flagged `truncated`); token counts that cannot be true (negative, absurdly
  large, not integers) count as missing.
- Token counts come from the endpoint's `usage`; when it reports none they are counted without a tokenizer
  (`runners.agent.prompt.count_tokens`: words, digits and symbols, plus 4 tokens per message; tiktoken is not
  used because it downloads its encodings at run time).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlsplit

from runners.agent.prompt import ANSWER_CUE, completion_prompt, count_message_tokens, count_tokens
from runners.config import ConfigError
from runners.llm.backend import BackendExhausted, Reply, Request
from runners.llm.endpoint_url import is_loopback, public_url
from runners.llm.loglik import (
    NoPromptLogprobs,
    OptionScore,
    choose,
    continuation,
    next_token_logprobs,
    option_loglik,
)
from runners.llm.response_cache import CachedReply, CacheError, ResponseCache, cache_key
from runners.llm.scoring import SCORINGS, as_completion_prompt, plan_prompts, tie_order
from tepa.redact import scrub

if TYPE_CHECKING:  # imported where it is used: the client takes most of a second, and a plan never calls
    import openai

MAX_RETRY_AFTER = 120.0  # seconds; a longer Retry-After is treated as this long (then retry_after_max)
MAX_TOKEN_COUNT = 10**9  # a usage count above this (or below 0) is not a real count
LOCAL_DUMMY_KEY = "sk-no-key-required"
LABEL_INSTRUCTION = "Reply with the label of one option only: {labels}."
_MAX_TOP_LOGPROBS = 20  # OpenAI's upper limit for top_logprobs
MAX_OPTION_LOGPROBS = 1000  # runners.llm.local.llama_server's; OpenAI's legacy completions allow 5, vLLM 20


@dataclass(frozen=True)
class _Runtime:
    """What a backend holds per event loop: the client, the concurrency limit, the budget's condition."""

    loop: asyncio.AbstractEventLoop
    client: openai.AsyncOpenAI
    limit: asyncio.Semaphore
    budget: asyncio.Condition


class _Transient(Exception):
    def __init__(self, kind: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.retry_after = retry_after


class _CallFailed(Exception):
    """The call failed for good: a permanent HTTP error (the request itself was refused), or transient
    ones until the retries ran out."""

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date (RFC 9110); None if absent or
    unparseable. A date in the past means 0."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def backoff_delay(
    attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None
) -> float:
    """Wait before retry number `attempt` (0-based): the server's Retry-After when it gave one, otherwise
    exponential backoff `base * 2**attempt` capped at `cap`, with jitter in [50%, 100%] so that concurrent
    streams do not retry in lockstep."""
    if retry_after is not None:
        return retry_after
    return min(cap, base * 2.0 ** min(attempt, 64)) * rng.uniform(0.5, 1.0)  # 2.0**1024 overflows


def pick_label(top_logprobs: Sequence[Mapping[str, object]], labels: Sequence[str]) -> str | None:
    """The option label with the highest log-probability among a token position's alternatives.

    Tokens are compared after stripping whitespace and trailing punctuation (" B", "B." and "B)" all
    mean B). None when no label is among them."""
    best: dict[str, float] = {}
    wanted = set(labels)
    for entry in top_logprobs:
        if not isinstance(entry, Mapping):  # an endpoint's malformed entry: not an alternative
            continue
        token = str(entry.get("token", "")).strip().rstrip(".):")
        logprob = entry.get("logprob")
        if token in wanted and isinstance(logprob, int | float):
            best[token] = max(best.get(token, -math.inf), float(logprob))
    return max(best, key=best.__getitem__) if best else None


def _first_choice(body: bytes) -> tuple[dict, dict]:
    """(first choice, usage) of a completion body (chat or text); a body that is not one raises
    _Transient: proxies and overloaded servers produce them."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Transient("malformed", f"body is not JSON ({exc.__class__.__name__})") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Transient("malformed", "response has no choices")
    return choices[0], data.get("usage") if isinstance(data.get("usage"), dict) else {}


def _parse_completion(body: bytes) -> tuple[str, list[dict] | None, dict]:
    """(text, first token's top logprobs or None, usage) from a chat completion body."""
    choice, usage = _first_choice(body)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _Transient("malformed", "choice has no message")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise _Transient("malformed", "message content is not text")
    top = None
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list) and logprobs["content"]:
        first = logprobs["content"][0]
        if isinstance(first, dict) and isinstance(first.get("top_logprobs"), list):
            top = first["top_logprobs"]
    return text, top, usage


def _parse_text_completion(body: bytes) -> tuple[dict, dict]:
    """(first choice, usage) from a /completions body."""
    choice, usage = _first_choice(body)
    if not isinstance(choice.get("text", ""), str):
        raise _Transient("malformed", "choice text is not text")
    return choice, usage


class OpenAIBackend:
    """A Backend over an OpenAI-compatible `/chat/completions` endpoint.

    `seed=None` sends each request's own seed (streams sample independently at temperature > 0); an int
    pins one seed for every call. `scoring="logprobs"` answers multiple-choice requests (those with
    `labels`) from the first token's log-probabilities and falls back to free text where the endpoint
    returns none (or rejects the request for them). `scoring="loglik"` talks to `/completions` instead,
    with the messages as one completion-style prompt (`runners.agent.prompt.completion_prompt`, fit for base
    models): a multiple-choice request scores every option's text by its summed log-probability
    (`runners.llm.loglik`; one request per option, sent back to back so that a server that caches the
    shared prompt prefix reuses it), a free answer is completed up to the end of the line; an endpoint
    that returns no prompt log-probabilities stops the run with a ConfigError. `permuted`, `calibrated`
    and `cloze` are the same with the position bias averaged out, calibrated away or not shown
    (`runners.llm.scoring`, which also lays out these prompts shared part first); `stats()` reports the
    server's own count of the prompt tokens it took from its cache where the server gives one.
    `option_logprobs=K` (> 0) scores these modes' options with one request per distinct prompt instead
    of one per option: the prompt's next-token `K` likeliest alternatives hold every option that is one
    token (`runners.llm.loglik.next_token_logprobs`), so calibrated scoring sends two requests per
    decision, not six; an option that is not among them (not one token, or less likely than the `K`th)
    is scored by its own echoed request as before (`option_fallbacks` in `stats()`).
    `cache_path` (a SQLite file) makes reruns free and identical; None disables it.

    `max_total_tokens` caps the tokens (prompt and completion) this backend's new calls may spend, as a
    reservation shared by concurrent calls (`_reserve`): once they are spent the next new call raises
    BackendExhausted, so the run stops cleanly and a rerun resumes it (cached replies cost nothing).
    `price_in` / `price_out` (per million prompt / completion tokens) turn the spent tokens into `cost`
    in `stats()`.
    """

    name = "openai"
    operational: ClassVar[frozenset[str]] = frozenset({
        "api_key_env", "cache_path", "max_concurrency", "timeout", "max_retries", "max_failed_calls",
        "backoff_base", "backoff_max", "retry_after_max", "max_retry_wait", "max_total_tokens", "price_in",
        "price_out",
    })  # fmt: skip

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int | None = 64,
        top_p: float | None = None,
        seed: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 6,
        max_concurrency: int = 8,
        max_failed_calls: int = 10,
        cache_path: str | os.PathLike[str] | None = None,
        scoring: str = "text",
        option_logprobs: int = 0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        retry_after_max: float | None = None,
        max_retry_wait: float = 600.0,
        max_reply_chars: int = 20_000,
        max_total_tokens: int | None = None,
        price_in: float = 0.0,
        price_out: float = 0.0,
    ) -> None:
        _check(urlsplit(base_url).scheme in ("http", "https"), "base_url", base_url, "an http(s) URL")
        _check(bool(model), "model", model, "a model name")
        _check(bool(api_key_env), "api_key_env", api_key_env, "a variable name")
        _check(temperature >= 0, "temperature", temperature, ">= 0")
        _check(max_tokens is None or max_tokens >= 1, "max_tokens", max_tokens, ">= 1 or None")
        _check(top_p is None or 0 < top_p <= 1, "top_p", top_p, "in (0, 1] or None")
        _check(timeout > 0, "timeout", timeout, "> 0 seconds")
        _check(max_retries >= 0, "max_retries", max_retries, ">= 0")
        _check(max_concurrency >= 1, "max_concurrency", max_concurrency, ">= 1")
        _check(max_failed_calls >= 1, "max_failed_calls", max_failed_calls, ">= 1")
        _check(scoring in SCORINGS, "scoring", scoring, f"one of {', '.join(SCORINGS)}")
        _check(0 <= option_logprobs <= MAX_OPTION_LOGPROBS, "option_logprobs", option_logprobs,
               f"in [0, {MAX_OPTION_LOGPROBS}] (0: one request per option)")  # fmt: skip
        _check(backoff_base >= 0, "backoff_base", backoff_base, ">= 0")
        _check(backoff_max >= backoff_base, "backoff_max", backoff_max, ">= backoff_base")
        retry_after_max = backoff_max if retry_after_max is None else retry_after_max
        _check(0 <= retry_after_max <= MAX_RETRY_AFTER, "retry_after_max", retry_after_max,
               f"in [0, {MAX_RETRY_AFTER:g}] seconds or None (= backoff_max)")  # fmt: skip
        _check(max_retry_wait >= 0, "max_retry_wait", max_retry_wait, ">= 0 seconds")
        _check(max_reply_chars >= 1, "max_reply_chars", max_reply_chars, ">= 1")
        check_budget(max_total_tokens, price_in, price_out)
        if not os.environ.get(api_key_env) and not is_loopback(base_url):
            raise ValueError(
                f"api_key_env: environment variable {api_key_env} is not set "
                f"(needed for {public_url(base_url)})"
            )
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.top_p = top_p
        self.seed = seed
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.max_failed_calls = max_failed_calls
        self.scoring = scoring
        self.option_logprobs = option_logprobs
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.max_retry_wait = max_retry_wait
        self.max_reply_chars = max_reply_chars
        self.max_total_tokens = max_total_tokens
        self.price_in = price_in
        self.price_out = price_out
        self.cache = ResponseCache(cache_path) if cache_path is not None else None
        if self.cache is not None:
            try:
                self.cache.check()  # a file that is no reply cache stops the run before any episode
            except CacheError as exc:
                raise ValueError(f"cache_path={cache_path}: {exc}") from None
        self._rng = random.Random()
        self._counts: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._retry_wait = 0.0
        self._lost = 0.0  # seconds of failed attempts and retry waits, against max_retry_wait
        self._last_failure = ""  # redacted, for the BackendExhausted message
        self._reserved = 0  # tokens that calls in flight may still spend (see `_reserve`)
        self._runtime: _Runtime | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(base_url={public_url(self.base_url)!r}, model={self.model!r}, "
            f"scoring={self.scoring!r}, cache={self.cache is not None})"
        )

    def __getstate__(self) -> dict:
        # The live client holds the key and is bound to an event loop: never pickle it.
        state = self.__dict__.copy()
        state["_runtime"] = None
        return state

    def _session(self) -> _Runtime:
        """The client, the concurrency limit and the budget's condition for the running event loop (made
        on first use in it)."""
        import openai

        from runners.llm.capped_transport import CappedTransport

        loop = asyncio.get_running_loop()
        if self._runtime is None or self._runtime.loop is not loop:
            client = openai.AsyncOpenAI(
                api_key=os.environ.get(self.api_key_env) or LOCAL_DUMMY_KEY,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,
                default_headers={"Accept-Encoding": "identity"},
                http_client=openai.DefaultAsyncHttpxClient(transport=CappedTransport(), timeout=self.timeout),
            )
            self._runtime = _Runtime(
                loop, client, asyncio.Semaphore(self.max_concurrency), asyncio.Condition()
            )
        return self._runtime

    async def aclose(self) -> None:
        """Close the HTTP connections and the cache (call once at the end of a run)."""
        if self._runtime is not None:
            await self._runtime.client.close()
            self._runtime = None
        if self.cache is not None:
            self.cache.close()

    def _key_params(self, request: Request) -> dict:
        params = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "seed": self._seed(request),
            "scoring": self.scoring,
            "endpoint": public_url(self.base_url),
        }
        if self.scoring == "logprobs":
            params["labels"] = list(request.labels)
        if SCORINGS[self.scoring]:
            params["options"] = list(request.options)
            params["prompt"] = "prefix-first"  # the prompt layout of `runners.llm.scoring`
            # how options are scored: echoed one by one, or read from one request's top alternatives
            params["option_logprobs"] = self.option_logprobs
        return params

    def _seed(self, request: Request) -> int:
        return self.seed if self.seed is not None else request.seed

    async def complete(self, request: Request) -> Reply:
        if self._counts["failed_calls"] >= self.max_failed_calls:
            raise BackendExhausted(self._exhausted_message())
        self._counts["calls"] += 1
        start = time.perf_counter()
        key = None
        if self.cache is not None:
            key = cache_key(self.model, request.messages, self._key_params(request))
            hit = self._cached(key)
            if hit is not None:
                return Reply(
                    hit.text,
                    hit.prompt_tokens,
                    hit.completion_tokens,
                    time.perf_counter() - start,
                    cached=True,
                    truncated=hit.truncated,
                )
        reservation = await self._reserve(request)
        try:
            text, prompt_tokens, completion_tokens = await self._answer(request)
        except _CallFailed as exc:
            self._counts["failed_calls"] += 1
            self._last_failure = self._redact(str(exc))
            if self._counts["failed_calls"] >= self.max_failed_calls:
                raise BackendExhausted(self._exhausted_message()) from None
            return Reply("", latency=time.perf_counter() - start, error=self._last_failure)
        else:
            self._counts["prompt_tokens"] += prompt_tokens
            self._counts["completion_tokens"] += completion_tokens
        finally:
            await self._settle(reservation)
        scrubbed = self._scrub(text)
        if scrubbed != text:  # logged redacted, never cached: a rerun asks again
            self._counts["redacted_replies"] += 1
            key = None
        text = scrubbed
        truncated = len(text) > self.max_reply_chars
        if truncated:
            text = text[: self.max_reply_chars]
            self._counts["truncated_replies"] += 1
        if key is not None:
            self._store(key, text, prompt_tokens, completion_tokens, truncated)
        return Reply(text, prompt_tokens, completion_tokens, time.perf_counter() - start, truncated=truncated)

    def _cached(self, key: str) -> CachedReply | None:
        try:
            return self.cache.get(key)
        except CacheError as exc:
            raise BackendExhausted(f"llm.cache_path={self.cache.path}: {exc}") from None

    def _store(
        self, key: str, text: str, prompt_tokens: int, completion_tokens: int, truncated: bool
    ) -> None:
        try:
            self.cache.put(key, self.model, text, prompt_tokens, completion_tokens, truncated)
        except CacheError as exc:
            raise BackendExhausted(f"llm.cache_path={self.cache.path}: {exc}") from None

    async def _reserve(self, request: Request) -> int:
        """Reserve the most a new call can spend against `max_total_tokens` (0 without a budget).

        A call starts only while the tokens spent plus those reserved by calls in flight are below the
        budget; otherwise it waits for the calls in flight to settle, and raises BackendExhausted once
        none is left in flight. So concurrent streams together overshoot the budget by less than one
        call's reservation (as far as the endpoint's token counts match `planned_cost`'s estimates)."""
        if self.max_total_tokens is None:
            return 0
        condition = self._session().budget
        async with condition:
            while True:
                spent = self._counts["prompt_tokens"] + self._counts["completion_tokens"]
                if spent + self._reserved < self.max_total_tokens:
                    need = self._worst_case(request)
                    self._reserved += need
                    return need
                if self._reserved == 0:
                    raise BackendExhausted(
                        f"llm.max_total_tokens={self.max_total_tokens} spent ({spent} tokens by this run's "
                        "calls)"
                    )
                await condition.wait()

    async def _settle(self, reservation: int) -> None:
        """Release a call's reservation (its real cost is counted by now) and wake the calls waiting."""
        if not reservation:
            return
        self._reserved -= reservation
        condition = self._session().budget
        async with condition:
            condition.notify_all()

    def _worst_case(self, request: Request) -> int:
        """The most tokens answering `request` can spend: its prompts (estimated) plus `max_tokens` per
        request (`max_reply_chars` when unlimited), and a logprob probe's free-text fallback."""
        longest = self.max_tokens or self.max_reply_chars
        _, prompt, completion = planned_cost(request, self.scoring, longest)
        if self.option_logprobs:  # every option may fall back to its own request
            shared = planned_cost(request, self.scoring, longest, self.option_logprobs)
            prompt, completion = prompt + shared[1], completion + shared[2]
        if self.scoring == "logprobs" and request.labels:
            _, fallback_prompt, fallback_completion = planned_cost(request, "text", longest)
            prompt, completion = prompt + fallback_prompt, completion + fallback_completion
        return prompt + completion

    async def _answer(self, request: Request) -> tuple[str, int, int]:
        """(text, prompt tokens, completion tokens) for one request, including a logprob fallback's cost."""
        messages = [dict(m) for m in request.messages]
        params: dict = {"temperature": self.temperature, "seed": self._seed(request)}
        if self.top_p is not None:
            params["top_p"] = self.top_p
        if SCORINGS[self.scoring]:
            return await self._loglik(request, params)
        spent_prompt = spent_completion = 0
        if self.scoring == "logprobs" and request.labels:
            instruction = {
                "role": "user",
                "content": LABEL_INSTRUCTION.format(labels=", ".join(request.labels)),
            }
            k = min(_MAX_TOP_LOGPROBS, max(5, len(request.labels)))
            probe = messages + [instruction]
            try:
                text, top, usage = await self._call(
                    probe, max_tokens=1, logprobs=True, top_logprobs=k, **params
                )
            except _CallFailed as exc:
                if not exc.refused:
                    raise
                top = None  # an endpoint that rejects logprobs: answer in free text
            else:
                spent_prompt, spent_completion = _usage(usage, count_message_tokens(probe), text)
            label = pick_label(top or [], request.labels)
            if label is not None:
                return f"Answer: {label}", spent_prompt, spent_completion
            self._counts["logprob_fallbacks"] += 1
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        text, _, usage = await self._call(messages, **params)
        prompt_tokens, completion_tokens = _usage(usage, count_message_tokens(messages), text)
        return text, spent_prompt + prompt_tokens, spent_completion + completion_tokens

    async def _loglik(self, request: Request, params: dict) -> tuple[str, int, int]:
        """(reply, prompt tokens, completion tokens) by log-likelihood scoring (see the class docstring)."""
        prefix = completion_prompt(request.messages)
        if not request.options:
            if self.max_tokens is not None:
                params["max_tokens"] = self.max_tokens
            choice, usage = await self._call_completions(prefix, stop=["\n"], **params)
            text = str(choice.get("text") or "")
            prompt_tokens, completion_tokens = _usage(usage, count_tokens(prefix), text)
            return f"{ANSWER_CUE} {text.strip()}", prompt_tokens, completion_tokens
        parsed = as_completion_prompt(request.messages)
        if parsed is None:  # a layout `runners.llm.scoring` does not know: its options scored as shown
            self._counts["unsplit_prompts"] += 1
            prompts = [prefix] * len(request.options)
            option_of, weight, order = range(len(request.options)), [1.0] * len(prompts), None
        else:
            plan = plan_prompts(self.scoring, *parsed, request.options)
            prompts, option_of, weight = list(plan.prompts), plan.option_of, plan.weight
            order = tie_order(self._seed(request), plan.shown, len(request.options))
            if self.scoring == "loglik":
                order = None  # as before the debiased modes: ties go to the first shown
        known: list[OptionScore | None] = [None] * len(prompts)
        answers: list[tuple[dict, dict]] = []
        if self.option_logprobs:
            known, answers = await self._from_next_token(prompts, option_of, request.options, params)
        missing = [j for j, score in enumerate(known) if score is None]
        full = {j: prompts[j] + continuation(request.options[option_of[j]]) for j in missing}
        # Sent together, one decision's requests queue back to back (the concurrency limit is first come,
        # first served), so a server that caches the last prompt evaluates their shared prefix once.
        echoed = await asyncio.gather(
            *(self._call_completions(full[j], echo=True, logprobs=0, max_tokens=1, **params) for j in missing)
        )
        for j, (choice, _) in zip(missing, echoed, strict=True):
            try:
                known[j] = option_loglik(choice, full[j], len(prompts[j]))
            except NoPromptLogprobs as exc:
                raise self._no_logprobs(exc) from None
        totals = [0.0] * len(request.options)
        tokens = [0] * len(request.options)
        for i, w, score in zip(option_of, weight, known, strict=True):
            totals[i] += w * score.loglik
            tokens[i] = tokens[i] or score.tokens
        spent_prompt = spent_completion = 0
        sent = [*answers, *echoed]
        texts = [*(p for p in dict.fromkeys(prompts) if self.option_logprobs), *full.values()]
        for prompt, (choice, usage) in zip(texts, sent, strict=True):
            generated = str(choice.get("text") or "")
            used = _usage(usage, count_tokens(prompt), generated.removeprefix(prompt))
            spent_prompt += used[0]
            spent_completion += used[1]
            cached = _cached_tokens(usage)
            if cached is not None:
                self._counts["server_cached_tokens"] += min(cached, used[0])
                self._counts["server_counted_prompt_tokens"] += used[0]
        scores = [OptionScore(t, n or 1) for t, n in zip(totals, tokens, strict=True)]
        return choose(request.labels, scores, order), spent_prompt, spent_completion

    async def _from_next_token(
        self, prompts: Sequence[str], option_of: Sequence[int], options: Sequence[str], params: dict
    ) -> tuple[list[OptionScore | None], list[tuple[dict, dict]]]:
        """(each planned prompt's option score where its prompt's next-token alternatives hold the
        option's text, else None; the answers, one per distinct prompt in order of first use)."""
        distinct = list(dict.fromkeys(prompts))
        answers = await asyncio.gather(
            *(
                self._call_completions(p, logprobs=self.option_logprobs, max_tokens=1, **params)
                for p in distinct
            )
        )
        tops = {}
        for prompt, (choice, _) in zip(distinct, answers, strict=True):
            try:
                tops[prompt] = next_token_logprobs(choice)
            except NoPromptLogprobs as exc:
                raise self._no_logprobs(exc) from None
        known: list[OptionScore | None] = []
        for prompt, i in zip(prompts, option_of, strict=True):
            value = tops[prompt].get(continuation(options[i]))
            known.append(None if value is None else OptionScore(value, 1))
            self._counts["option_fallbacks"] += value is None
        return known, list(answers)

    def _no_logprobs(self, exc: NoPromptLogprobs) -> ConfigError:
        """The one line for an endpoint that returns no log-probabilities to score options by."""
        what = "next-token" if self.option_logprobs else "prompt"
        return ConfigError(
            f"llm.scoring={self.scoring}: {public_url(self.base_url)} returns no {what} "
            f"log-probabilities ({exc}); it needs echo with logprobs on /completions (vLLM, "
            "llama-cpp-python with all logits, python -m runners.llm.local.serve)"
            + (", or llm.option_logprobs=0" if self.option_logprobs else "")
            + ", or use llm.scoring=logprobs or text"
        )

    async def _call_completions(self, prompt: str, **params: object) -> tuple[dict, dict]:
        """One text completion (/completions); an endpoint without it (404, 405, 501) is a ConfigError."""
        try:
            return await self._call(prompt, completions=True, **params)
        except _CallFailed as exc:
            if exc.refused and re.match(r"HTTP (404|405|501)\b", str(exc)):
                raise ConfigError(
                    f"llm.scoring={self.scoring}: {public_url(self.base_url)} has no /completions endpoint "
                    f"({' '.join(str(exc).split())[:80]}); use llm.scoring=logprobs or text"
                ) from None
            raise

    async def _call(self, messages: list[dict] | str, completions: bool = False, **params: object) -> tuple:
        """One chat completion (or, with `completions`, a text completion of the prompt `messages`),
        retried on transient failures; raises _CallFailed."""
        import openai

        from runners.llm.capped_transport import Oversized

        session = self._session()
        client = session.client
        for attempt in range(self.max_retries + 1):
            began = time.monotonic()
            try:
                async with session.limit:
                    if self._counts["failed_calls"] >= self.max_failed_calls:
                        # another stream's call exhausted the endpoint while this one waited its turn
                        raise BackendExhausted(self._exhausted_message())
                    self._counts["requests"] += 1
                    # The whole exchange within `timeout`: the client's own timeout is per read, which
                    # a server trickling its body a byte at a time never trips.
                    async with asyncio.timeout(self.timeout):
                        if completions:
                            raw = await client.completions.with_raw_response.create(
                                model=self.model, prompt=messages, **params
                            )
                        else:
                            raw = await client.chat.completions.with_raw_response.create(
                                model=self.model, messages=messages, **params
                            )
                        body = raw.http_response.content
                return _parse_text_completion(body) if completions else _parse_completion(body)
            except openai.APIStatusError as exc:
                status = exc.status_code
                message = self._redact(exc.message)  # an endpoint may echo the key in its error
                if not (status in (408, 409, 429) or status >= 500):
                    raise _CallFailed(f"HTTP {status}: {message}", refused=True) from None
                kind = "rate_limited" if status == 429 else f"http_{status}"
                failure = _Transient(
                    kind, message, parse_retry_after(exc.response.headers.get("retry-after"))
                )
            except (openai.APITimeoutError, TimeoutError):
                failure = _Transient("timeout", f"no complete answer within {self.timeout:g} s")
            except openai.APIConnectionError as exc:
                failure = _Transient("connection", self._redact(str(exc.__cause__ or exc)))
            except Oversized as exc:
                failure = _Transient("oversized", str(exc))
            except _Transient as exc:
                failure = exc
            self._faults[failure.kind] += 1
            self._lost += time.monotonic() - began
            if attempt == self.max_retries:
                break
            retry_after = failure.retry_after
            if retry_after is not None:
                retry_after = min(retry_after, self.retry_after_max)
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng, retry_after)
            if self._lost + delay > self.max_retry_wait:
                self._last_failure = self._redact(str(failure))
                raise BackendExhausted(
                    f"endpoint {public_url(self.base_url)}: {self._lost:.0f} s lost to failed attempts "
                    f"and retry waits, the next wait would pass max_retry_wait={self.max_retry_wait:g} s "
                    f"(the last error: {' '.join(self._last_failure.split())[:200]})"
                )
            self._counts["retries"] += 1
            self._retry_wait += delay
            self._lost += delay
            await asyncio.sleep(delay)
        raise _CallFailed(
            f"gave up after {self.max_retries + 1} attempts; last error {failure}", refused=False
        )

    def _scrub(self, text: str) -> str:
        """`text` without the key or anything shaped like one (an endpoint may echo the Authorization
        header); ordinary words are left alone (`tepa.redact`)."""
        return scrub(text, os.environ.get(self.api_key_env))

    def _redact(self, text: str) -> str:
        """An error message fit for the episode log: scrubbed, and short."""
        return self._scrub(text)[:500]

    def _exhausted_message(self) -> str:
        """One line: the endpoint, how many calls failed and why the last one did."""
        last = " ".join(self._last_failure.split())[:200]
        return (
            f"endpoint {public_url(self.base_url)} failed {self._counts['failed_calls']} calls "
            f"(max_failed_calls={self.max_failed_calls}; the last: {last})"
        )

    def stats(self) -> dict:
        """Counters for meta.json: calls, HTTP requests, retries and their causes, failures, cache, tokens."""
        counts = self._counts
        cost = (counts["prompt_tokens"] * self.price_in + counts["completion_tokens"] * self.price_out) / 1e6
        stats = {
            "backend": self.name,
            "model": self.model,
            "base_url": public_url(self.base_url),
            "scoring": self.scoring,
            "calls": counts["calls"],
            "requests": counts["requests"],
            "retries": counts["retries"],
            "retry_wait_s": round(self._retry_wait, 3),
            "truncated_replies": counts["truncated_replies"],
            "redacted_replies": counts["redacted_replies"],
            "faults": dict(sorted(self._faults.items())),
            "failed_calls": counts["failed_calls"],
            "logprob_fallbacks": counts["logprob_fallbacks"],
            "option_fallbacks": counts["option_fallbacks"],
            "prompt_tokens": counts["prompt_tokens"],
            "completion_tokens": counts["completion_tokens"],
            "cost": round(cost, 6),
        }
        if counts["server_counted_prompt_tokens"]:
            # The server's own count: prompt tokens it took from its cache, of those it reported; the share
            # it evaluated is what prefix-friendly prompts and back-to-back option requests save.
            sent = counts["server_counted_prompt_tokens"]
            stats["server_cached_tokens"] = counts["server_cached_tokens"]
            stats["server_counted_prompt_tokens"] = sent
            stats["evaluated_prompt_share"] = round(1 - counts["server_cached_tokens"] / sent, 4)
        if counts["unsplit_prompts"]:
            stats["unsplit_prompts"] = counts["unsplit_prompts"]
        stats.update(self.cache.stats() if self.cache is not None else {"cache_hits": 0, "cache_misses": 0})
        return stats


def _usage(usage: Mapping[str, object], prompt_estimate: int, text: str) -> tuple[int, int]:
    """(prompt, completion) tokens from the endpoint's usage; a count that cannot be true is estimated
    (`prompt_estimate` for the prompt, `count_tokens` for the reply)."""
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return (
        prompt if _plausible(prompt) else prompt_estimate,
        completion if _plausible(completion) else count_tokens(text),
    )


def _cached_tokens(usage: Mapping[str, object]) -> int | None:
    """The prompt tokens the server took from its cache (OpenAI's `usage.prompt_tokens_details.
    cached_tokens`, which vLLM and `runners.llm.local.llama_server` also report); None when not reported."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return cached if _plausible(cached) else None


def check_budget(max_total_tokens: int | None, price_in: float, price_out: float) -> None:
    """The token budget and the prices (per million tokens) are sensible; a ValueError naming the key."""
    _check(max_total_tokens is None or max_total_tokens >= 1, "max_total_tokens", max_total_tokens,
           ">= 1 or None (no limit)")  # fmt: skip
    _check(price_in >= 0, "price_in", price_in, ">= 0 (per million prompt tokens)")
    _check(price_out >= 0, "price_out", price_out, ">= 0 (per million completion tokens)")


def planned_cost(
    request: Request, scoring: str, max_tokens: int | None, option_logprobs: int = 0
) -> tuple[int, int, int]:
    """(HTTP requests, prompt tokens, completion tokens at most) that answering `request` takes with
    `scoring`, prompt tokens counted as for an endpoint that reports no usage (`count_tokens`): what
    `python -m runners.run ... plan=true` adds up before a paid run. With `option_logprobs` the scored
    modes send one request per distinct prompt, as when every option is among its alternatives (each
    option that is not costs one request more)."""
    if SCORINGS.get(scoring):
        prefix = completion_prompt(request.messages)
        if not request.options:
            return 1, count_tokens(prefix), max_tokens or 0
        parsed = as_completion_prompt(request.messages)
        if parsed is None:
            bases, option_of = [prefix] * len(request.options), range(len(request.options))
        else:
            plan = plan_prompts(scoring, *parsed, request.options)
            bases, option_of = plan.prompts, plan.option_of
        if option_logprobs:
            prompts = list(dict.fromkeys(bases))
        else:
            prompts = [p + continuation(request.options[i]) for p, i in zip(bases, option_of, strict=True)]
        return len(prompts), sum(map(count_tokens, prompts)), len(prompts)
    if scoring == "logprobs" and request.labels:
        instruction = LABEL_INSTRUCTION.format(labels=", ".join(request.labels))
        return 1, count_message_tokens([*request.messages, {"role": "user", "content": instruction}]), 1
    return 1, count_message_tokens(request.messages), max_tokens or 0


def _plausible(count: object) -> bool:
    return type(count) is int and 0 <= count <= MAX_TOKEN_COUNT


def _check(ok: bool, name: str, value: object, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r}: must be {expected}")
