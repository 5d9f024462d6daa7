"""Every option-scoring mode against the REAL local models (make test-llm), each served as `make
reproduce-llm` serves it (runners.llm.local.llama_server): memory that names an option raises that
option's share of the mode's scores, and the server's own count of the prompt tokens it evaluated stays
below the share the prefix-first prompt is meant to reach; options read from one request per prompt
(`llm.option_logprobs`) get the scores and choices their own requests give. Nothing is asserted on a
model's numbers. Skipped, with the reason, when the local-llm extra is not installed."""

from __future__ import annotations

import asyncio

import pytest

from runners.agent.prompt import LABELS
from runners.llm.backend import Request
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


#: requests per decision with memory when every option is read from its prompt's alternatives
PER_DECISION = {"loglik": 1, "permuted": 3, "calibrated": 2, "cloze": 1}


def answer(base_url: str, model: str, scoring: str, requests: list[Request], **settings: object):
    backend = OpenAIBackend(base_url, model, scoring=scoring, max_concurrency=1, timeout=600.0, **settings)

    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    replies = asyncio.run(go())
    assert all(r.error is None for r in replies), [r.error for r in replies]
    return replies, backend.stats()


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("scoring", MODES)
def test_one_request_per_prompt_scores_every_option_as_its_own_request_does(server, scoring, request):
    """The same decisions scored option by option (echo) and from one request per prompt (the next
    token's 300 likeliest alternatives, as the local configs ask): every option's score within 0.001
    (the reply's precision), the same choice, and the requests the mode needs when every option is among
    the alternatives, plus one per option that is not."""
    base_url, model = request.getfixturevalue(server), SERVERS[server]
    requests = [decision(job) for job in JOBS] + [decision(job, named) for job in JOBS for named in WORDS[:3]]
    each, _ = answer(base_url, model, scoring, requests)
    shared, stats = answer(base_url, model, scoring, requests, option_logprobs=300)
    gaps = [
        abs(a[0] - b[0])
        for x, y in zip(each, shared, strict=True)
        for a, b in zip(scores(x.text).values(), scores(y.text).values(), strict=True)
    ]
    changed = sum(x.text.split()[1] != y.text.split()[1] for x, y in zip(each, shared, strict=True))
    asked = sum(1 for r in requests if scoring != "calibrated" or "VALID" in r.messages[1]["content"])
    print(
        f"\n{model} {scoring}: largest score difference {max(gaps):.4f}, {changed} of {len(requests)} "
        f"choices changed; {stats['requests']} requests ({stats['option_fallbacks']} options scored alone)"
    )
    assert max(gaps) <= 0.001 and changed == 0
    assert stats["requests"] == PER_DECISION[scoring] * asked + stats["option_fallbacks"]
