"""Every option-scoring mode against the REAL local models (make test-llm), each served as `make
reproduce-llm` serves it (runners.llm.local.llama_server): memory that names an option makes the mode
choose it more often than chance, and the server's own count of the prompt tokens it evaluated stays
below the share the prefix-first prompt is meant to reach. Nothing is asserted on exact numbers. Skipped,
with the reason, when the local-llm extra is not installed."""

from __future__ import annotations

import asyncio

import pytest

from runners.agent.prompt import LABELS
from runners.llm.local.serve import GEMMA_ALIAS, MODEL_ALIAS
from runners.llm.openai_backend import OpenAIBackend
from runners.llm.scoring import SCORINGS
from tests.test_llm_loglik import JOBS, WORDS, decision

pytestmark = pytest.mark.llm

SERVERS = {"smollm2_completions_server": MODEL_ALIAS, "gemma_server": GEMMA_ALIAS}
MODES = [mode for mode, scored in SCORINGS.items() if scored]
#: the most of the prompt tokens sent that the server may evaluate: a decision's requests share their
#: prompt up to the options (the target of the prefix-first prompt is 0.4)
MAX_EVALUATED = 0.4


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("scoring", MODES)
def test_memory_that_names_an_option_is_followed_and_the_server_reuses_the_prompt(server, scoring, request):
    base_url, model = request.getfixturevalue(server), SERVERS[server]
    cases = [(job, named) for job in JOBS for named in WORDS[:3]]
    requests = [decision(job, named) for job, named in cases]
    backend = OpenAIBackend(base_url, model, scoring=scoring, max_concurrency=1, timeout=600.0)

    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    replies = asyncio.run(go())
    assert all(r.error is None for r in replies), [r.error for r in replies]
    picks = [q.options[LABELS.index(r.text.split()[1])] for r, q in zip(replies, requests, strict=True)]
    followed = sum(p == named for p, (_, named) in zip(picks, cases, strict=True))
    stats = backend.stats()
    share, sent = stats["evaluated_prompt_share"], stats["prompt_tokens"]
    print(f"\n{model} {scoring}: memory followed {followed}/{len(cases)}; evaluated {share:.3f} of {sent}")
    assert followed > len(cases) / 3  # without memory a job's choice matches its named option 1 time in 3
    assert stats["server_counted_prompt_tokens"] == stats["prompt_tokens"]
    assert stats["evaluated_prompt_share"] <= MAX_EVALUATED
