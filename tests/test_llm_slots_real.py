"""The local completions server's cache slots against the REAL Gemma 3 270M (make test-llm): a calibrated
stream whose decisions alternate between jobs (each with its own memory) and between prompts with and
without memory is evaluated far less with a slot per prefix than with one cache, and every score is the
same float either way and the same as with nothing cached: a score is a function of its prompt alone,
whatever the server evaluated before. Skipped, with the reason, when the local-llm extra is not
installed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest

from runners.agent.prompt import SYSTEM_PROMPT as SYSTEM
from runners.llm.local.llama_server import LoglikModel
from runners.llm.local.serve import GEMMA_ALIAS, LocalLLMUnavailable, require_local_llm
from runners.llm.loglik import continuation
from runners.llm.scoring import Decision, plan_prompts

pytestmark = pytest.mark.llm

OPTIONS = ("red", "blue", "green")


def stream(steps: int = 12, jobs: int = 3) -> list[str]:
    """The prompts calibrated scoring sends for `steps` decisions cycling over `jobs`, each job's memory
    twelve lines long and growing by one line per decision (as Append-Only's does)."""
    prompts = []
    for t in range(steps):
        job = t % jobs
        memory = tuple(
            f'- [step {s}] VALID "{OPTIONS[job]}": action "{OPTIONS[job]}" worked for job {job}'
            for s in range(job - 12 * jobs, t, jobs)
        )
        own = (f"Step {t}. Job {job}: pick the action that completes it.",)
        plan = plan_prompts("calibrated", SYSTEM, Decision(memory, own, OPTIONS), OPTIONS)
        prompts += [p + continuation(OPTIONS[i]) for p, i in zip(plan.prompts, plan.option_of, strict=True)]
    return prompts


def model(slots: int, threads: int = 2) -> LoglikModel:
    try:
        gguf = require_local_llm("gemma3")
    except LocalLLMUnavailable as exc:
        pytest.skip(f"local-llm extra not installed ({exc})")
    return LoglikModel(gguf, GEMMA_ALIAS, 2048, threads, swa_full=True, slots=slots)


def score(model: LoglikModel, prompt: str) -> tuple[float, int]:
    """A prompt's last-line log-likelihood, and the prompt tokens the server evaluated for it."""
    answer = model.complete({"prompt": prompt, "echo": True, "logprobs": 0, "max_tokens": 0})
    usage = answer["usage"]
    value = sum(v for v in answer["choices"][0]["logprobs"]["token_logprobs"] if v is not None)
    return value, usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]


def scored(slots: int, prompts: list[str], fresh: bool = False) -> tuple[list[float], int]:
    """Every prompt's last-line log-likelihood, and the prompt tokens the server evaluated (`fresh`:
    each prompt with the cache emptied first)."""
    served = model(slots)
    values, evaluated = [], 0
    for prompt in prompts:
        if fresh:
            for slot in served.slots:
                slot.tokens, slot.canonical = [], 0
        value, new = score(served, prompt)
        values.append(value)
        evaluated += new
    return values, evaluated


def test_a_slot_per_prefix_evaluates_an_interleaved_stream_far_less_and_scores_it_identically():
    prompts = stream()
    one, evaluated_one = scored(1, prompts)
    many, evaluated_many = scored(4, prompts)
    alone, evaluated_alone = scored(1, prompts, fresh=True)
    print(f"\nevaluated: {evaluated_alone} uncached, {evaluated_one} in one slot, {evaluated_many} in four")
    assert evaluated_many < 2 / 3 * evaluated_one < 0.5 * evaluated_alone
    assert one == many == alone


def test_two_prompts_at_once_on_one_thread_instances_score_as_one_at_a_time_on_two_threads():
    """What `--parallel 2` serves (`make reproduce-llm`): two requests at once, each in a slot of its own
    with one thread, give the same floats as the default server's two-thread instance one at a time."""
    prompts = stream()
    alone, _ = scored(1, prompts, fresh=True)
    with ThreadPoolExecutor(2) as pool:
        together = [value for value, _ in pool.map(partial(score, model(4, threads=1)), prompts)]
    assert together == alone
