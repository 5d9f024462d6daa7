"""The one backend protocol: a model (simulated or real) that answers a rendered prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Request:
    """One call: the chat messages (the only thing a model reads), the options' labels for
    logprob scoring, and the stream's seed (for backends that sample)."""

    messages: tuple[dict[str, str], ...]
    seed: int = 0
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's answer and its cost. `error` is set (and `text` empty) when the call failed for good."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0
    cached: bool = False
    error: str | None = None


@runtime_checkable
class Backend(Protocol):
    name: str

    async def complete(self, request: Request) -> Reply:
        """Answer one request. Transient failures are retried inside; a final failure is a Reply with
        `error` set, never an exception, so the episode is logged and scored."""

    def stats(self) -> dict:
        """Counters for meta.json (calls, cache hits and misses, failures)."""
