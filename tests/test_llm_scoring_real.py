"""Every option-scoring mode against the REAL local models (make test-llm), each served as `make
reproduce-llm` serves it (runners.llm.local.llama_server): memory that names an option raises that
option's share of the mode's scores, and the server's own count of the prompt tokens it evaluated stays
below the share the prefix-first prompt is meant to reach. Nothing is asserted on exact numbers. Skipped,
with the reason, when the local-llm extra is not installed."""

from __future__ import annotations

import asyncio

import pytest

from runners.agent.prompt import LABELS
from runners.llm.local.serve import GEMMA_ALIAS, MODEL_ALIAS
from runners.llm.openai_backend import OpenAIBackend
from runners.llm.scoring import SCORINGS
from tests.test_llm_loglik import JOBS, WORDS, decision, scores, share

pytestmark = pytest.mark.llm

SERVERS = {"smollm2_completions_server": MODEL_ALIAS, "gemma_server": GEMMA_ALIAS}
MODES = [mode for mode, scored in SCORINGS.items() if scored]
#: the most of the prompt tokens sent that the server may evaluate: a decision's requests share their
#: prompt up to the options (the target of the prefix-first prompt is 0.4)
MAX_EVALUATED = 0.4


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("scoring", MODES)
def test_memory_that_names_an_option_raises_its_share_and_the_server_reuses_the_prompt(
    server, scoring, request
):
    """Over 3 jobs, each option named in turn by three VALID lines: the named option's share of the
    options' (combined) score is higher on average than without memory; the server evaluated at most
    MAX_EVALUATED of the prompt tokens sent (its own count)."""
    base_url, model = request.getfixturevalue(server), SERVERS[server]
    cases = [(job, named) for job in JOBS for named in WORDS[:3]]
    requests = [decision(job) for job in JOBS] + [decision(job, named) for job, named in cases]
    backend = OpenAIBackend(base_url, model, scoring=scoring, max_concurrency=1, timeout=600.0)

    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    replies = asyncio.run(go())
    assert all(r.error is None for r in replies), [r.error for r in replies]
    without = {job: scores(reply.text) for job, reply in zip(JOBS, replies, strict=False)}
    pairs = []
    for (job, named), reply in zip(cases, replies[len(JOBS) :], strict=True):
        label = LABELS[decision(job).options.index(named)]
        pairs.append((share(without[job], label), share(scores(reply.text), label)))
    before, after = (sum(s) / len(s) for s in zip(*pairs, strict=True))
    stats = backend.stats()
    evaluated, sent = stats["evaluated_prompt_share"], stats["prompt_tokens"]
    print(
        f"\n{model} {scoring}: named share {before:.3f} -> {after:.3f}; evaluated {evaluated:.3f} of {sent}"
    )
    assert after > before, pairs
    assert stats["server_counted_prompt_tokens"] == sent
    assert evaluated <= MAX_EVALUATED
