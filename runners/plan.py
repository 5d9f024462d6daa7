"""What a run will cost before it runs: `python -m runners.run ... plan=true` (also with `-m`: one line per
run of the sweep).

A dry pass plays every stream of the composed run with the simulated reader standing in for the model
(nothing is logged, no endpoint is called) and adds up what the configured backend would send for each
decision: HTTP requests, prompt tokens (counted from the rendered prompts without a tokenizer,
`runners.agent.prompt.count_tokens`) and, with `llm.price_in` / `llm.price_out` (per million
tokens), the cost. The real model's choices change what memory holds, so the real run's numbers differ
somewhat; cached replies cost nothing and are not subtracted.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from runners.agent.loop import run_stream
from runners.agent.prompt import count_message_tokens
from runners.config import ConfigError, RunSpec
from runners.llm.backend import Reply, Request
from runners.llm.openai_backend import OpenAIBackend, check_budget, planned_cost
from runners.llm.simulated.reader import SimulatedBackend


@dataclass(frozen=True)
class Plan:
    streams: int
    decisions: int
    calls: int
    prompt_tokens: int
    completion_tokens: int  # at most: free-text replies may stop before max_tokens
    price_in: float = 0.0
    price_out: float = 0.0

    @property
    def cost(self) -> float:
        return (self.prompt_tokens * self.price_in + self.completion_tokens * self.price_out) / 1e6

    def describe(self, name: str = "") -> str:
        priced = f", cost about {self.cost:.4f}" if self.price_in or self.price_out else ""
        return (
            f"plan{f' {name}' if name else ''}: {self.streams} stream(s), {self.decisions} decisions, "
            f"{self.calls} model calls, about {self.prompt_tokens} prompt tokens and at most "
            f"{self.completion_tokens} completion tokens{priced} (llm.price_in / llm.price_out per million)"
        )


class _DryBackend:
    """The simulated reader answers; the configured backend's way of asking is what is counted."""

    name = "dry"

    def __init__(self, scoring: str | None, max_tokens: int | None) -> None:
        self.reader = SimulatedBackend()
        self.scoring = scoring
        self.max_tokens = max_tokens
        self.calls = self.prompt_tokens = self.completion_tokens = 0

    async def complete(self, request: Request) -> Reply:
        if self.scoring is None:  # not an openai backend: one call per decision
            calls, prompt, completion = 1, count_message_tokens(request.messages), 0
        else:
            calls, prompt, completion = planned_cost(request, self.scoring, self.max_tokens)
        self.calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return self.reader.answer(request)

    def stats(self) -> dict:
        return {}


def plan(spec: RunSpec) -> Plan:
    """The dry pass over every seed of `spec` (see the module docstring)."""
    params = spec.llm.params
    is_openai = issubclass(spec.llm.cls, OpenAIBackend)
    prices = (params.get("price_in", 0.0), params.get("price_out", 0.0)) if is_openai else (0.0, 0.0)
    dry = _DryBackend(None, None)
    if is_openai:
        try:
            check_budget(params.get("max_total_tokens"), *prices)
        except ValueError as exc:
            raise ConfigError(f"llm.{exc}") from None
        dry = _DryBackend(params.get("scoring", "text"), params.get("max_tokens"))
    decisions = 0
    for seed in spec.seeds:
        with contextlib.closing(spec.env.build()) as env:
            result = asyncio.run(
                run_stream(
                    env,
                    spec.memory.build(),
                    dry,
                    seed=seed,
                    labels={},
                    max_episodes=spec.max_episodes,
                    ranker=spec.retrieval.ranker(),
                )
            )
        decisions += len(result.records)
    return Plan(len(spec.seeds), decisions, dry.calls, dry.prompt_tokens, dry.completion_tokens, *prices)
