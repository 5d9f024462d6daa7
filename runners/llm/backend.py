"""The one backend protocol: a model (simulated or real) that answers a rendered prompt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Request:
    """One call: the chat messages (the only thing a model reads), the options' labels (logprob scoring)
    and texts (log-likelihood scoring), and the stream's seed (for backends that sample)."""

    messages: tuple[dict[str, str], ...]
    seed: int = 0
    labels: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's answer and its cost. `error` is set (and `text` empty) when the call failed for good;
    `truncated` when the reply was longer than the backend keeps (`text` is its beginning)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0
    cached: bool = False
    error: str | None = None
    truncated: bool = False


class BackendExhausted(RuntimeError):
    """The endpoint is presumed down (too many calls failed for good). The one exception `complete` may
    raise: the runner stops the run cleanly, keeping the episodes logged so far, and a rerun of the same
    command resumes it. The message says what failed, never a secret."""


@runtime_checkable
class Backend(Protocol):
    """A model. `operational` names the constructor parameters that change how calls are made (timeouts,
    retries, a cache file, a budget) but never what the model answers: a rerun that changes only these
    continues the same streams (`runners.store.identity`), so a new backend declares its own."""

    name: str
    operational: ClassVar[frozenset[str]]

    async def complete(self, request: Request) -> Reply:
        """Answer one request. Transient failures are retried inside; a final failure is a Reply with
        `error` set, so the episode is logged and scored, until so many failed that the backend raises
        BackendExhausted."""

    def stats(self) -> dict:
        """Counters for meta.json (calls, cache hits and misses, failures)."""

    async def aclose(self) -> None:
        """Release connections and files once the run's streams are done (called once, also after a
        failure)."""


def total_stats(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    """Two invocations' `stats()` as one: counts and costs added (nested counters key by key), anything
    else (the model, the endpoint) as `later` says. How a resumed stream reports what all the
    invocations that worked on it spent."""
    total = dict(earlier)
    for key, value in later.items():
        before = total.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            total[key] = total_stats(before, value)
        elif _is_number(value) and _is_number(before):
            total[key] = round(before + value, 6) if isinstance(before + value, float) else before + value
        else:
            total[key] = value
    if total.get("server_counted_prompt_tokens"):  # a share is not a count: from the summed counts again
        share = 1 - total.get("server_cached_tokens", 0) / total["server_counted_prompt_tokens"]
        total["evaluated_prompt_share"] = round(share, 4)
    return total


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
