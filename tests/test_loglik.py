"""Option log-likelihood scoring (`llm.scoring=loglik`): the scoring rule, and the openai backend against a
stub /completions endpoint that echoes prompts with log-probabilities (no model needed)."""

import asyncio

import pytest

from runners.agent.parse import parse_choice
from runners.agent.prompt import (
    ANSWER_CUE,
    LETTER_INSTRUCTION,
    NAME_INSTRUCTION,
    completion_prompt,
    count_message_tokens,
    count_tokens,
)
from runners.config import ConfigError
from runners.llm.backend import BackendExhausted, Request
from runners.llm.loglik import NoPromptLogprobs, OptionScore, choose, option_loglik
from runners.llm.openai_backend import OpenAIBackend
from tests.helpers.stub_server import StubReply, completion, echoed

OPTIONS = ("red", "blue", "green")
MESSAGES = (
    {"role": "system", "content": "Pick the option most likely to succeed now."},
    {"role": "user", "content": f"Step 3. Job 1.\nOptions:\nA) red\nB) blue\nC) green\n{LETTER_INSTRUCTION}"},
)
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "timeout": 2.0, "max_retries": 1}


def make(stub, **kwargs) -> OpenAIBackend:
    return OpenAIBackend(stub.base_url, "stub-model", scoring="loglik", **{**FAST, **kwargs})


def ask(backend: OpenAIBackend, *requests: Request):
    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    return asyncio.run(go())


def decision(options=OPTIONS, seed: int = 0) -> Request:
    return Request(MESSAGES, seed=seed, labels=("A", "B", "C")[: len(options)], options=tuple(options))


# --- the scoring rule ------------------------------------------------------------------------------


def test_an_option_scores_the_tokens_that_end_after_the_prompt_and_not_the_generated_one():
    prompt = "Answer: red"
    choice = {
        "text": prompt + "!",
        "logprobs": {
            "tokens": ["Answer", ":", " r", "ed", "!"],
            "token_logprobs": [None, -0.5, -2.0, -1.0, -9.0],
            "text_offset": [0, 6, 7, 9, 11],
        },
    }
    assert option_loglik(choice, prompt, len("Answer:")) == OptionScore(-3.0, 2)
    # a token that straddles the boundary (": r") belongs to the option
    choice["logprobs"] = {"tokens": ["Answer", ": r", "ed", "!"], "token_logprobs": [None, -2.5, -1.0, -9.0],
                          "text_offset": [0, 6, 9, 11]}  # fmt: skip
    assert option_loglik(choice, prompt, len("Answer:")) == OptionScore(-3.5, 2)


@pytest.mark.parametrize(
    "choice",
    [
        {"text": "red", "logprobs": None},  # no echo: a server that ignores it
        {"text": "Answer: red", "logprobs": {"content": [{"token": "red", "logprob": -1}]}},  # chat-style
        {
            "text": "Answer: red",
            "logprobs": {
                "tokens": ["Answer", ": red"],
                "token_logprobs": [None, None],
                "text_offset": [0, 6],
            },
        },  # fmt: skip
    ],
)
def test_a_reply_without_prompt_logprobs_is_refused(choice):
    with pytest.raises(NoPromptLogprobs):
        option_loglik(choice, "Answer: red", len("Answer:"))


def test_the_highest_sum_wins_ties_go_to_the_first_and_the_reply_parses_to_its_label():
    scores = [OptionScore(-4.0, 2), OptionScore(-1.0, 1), OptionScore(-1.0, 4)]
    reply = choose(("A", "B", "C"), scores)
    assert reply == "Answer: B | loglik A=-4.000 B=-1.000 C=-1.000 | per-token A=-2.000 B=-1.000 C=-0.250"
    assert parse_choice(reply, OPTIONS) == 1


def test_the_completion_prompt_asks_for_the_option_as_written_and_ends_with_the_answer_cue():
    prompt = completion_prompt(MESSAGES)
    assert prompt.startswith(MESSAGES[0]["content"] + "\n\nStep 3.")
    assert LETTER_INSTRUCTION not in prompt and NAME_INSTRUCTION in prompt
    assert prompt.endswith("\n" + ANSWER_CUE)


# --- the backend against a stub endpoint ------------------------------------------------------------


def test_loglik_scores_every_option_text_through_completions_and_picks_the_likeliest(stub_server):
    stub_server.respond = lambda body: echoed(body, favour="green", usage=True)
    (reply,) = ask(make(stub_server), decision())
    assert reply.error is None and reply.text.startswith("Answer: C | loglik ")
    assert stub_server.paths == ["/v1/completions"] * 3
    prefix = completion_prompt(MESSAGES)
    assert sorted(r["prompt"] for r in stub_server.requests) == sorted(f"{prefix} {o}" for o in OPTIONS)
    assert all(
        r["echo"] is True and r["logprobs"] == 0 and r["max_tokens"] == 1 for r in stub_server.requests
    )
    # the endpoint's usage, summed over the three requests
    usage = [echoed(r, usage=True)["usage"]["prompt_tokens"] for r in stub_server.requests]
    assert reply.prompt_tokens == sum(usage)
    assert reply.completion_tokens == 3


def test_loglik_follows_the_option_the_endpoint_favours(stub_server):
    for favour, label in (("red", "A"), ("blue", "B")):
        stub_server.respond = lambda body, favour=favour: echoed(body, favour=favour)
        (reply,) = ask(make(stub_server), decision())
        assert reply.text.startswith(f"Answer: {label} |")


def test_loglik_replies_are_cached_and_a_rerun_is_free(stub_server, tmp_path):
    stub_server.respond = lambda body: echoed(body, favour="blue")
    cache = tmp_path / "cache.sqlite"
    first = ask(make(stub_server, cache_path=cache), decision())
    second_backend = make(stub_server, cache_path=cache)
    second = ask(second_backend, decision())
    assert second[0].cached and second[0].text == first[0].text
    assert len(stub_server.requests) == 3 and second_backend.stats()["requests"] == 0


def test_an_endpoint_that_does_not_echo_prompt_logprobs_stops_with_one_line(stub_server):
    stub_server.respond = lambda body: {"choices": [{"index": 0, "text": " red", "logprobs": None}]}
    with pytest.raises(
        ConfigError, match=r"^llm\.scoring=loglik: .* returns no prompt log-probabilities"
    ) as exc:
        ask(make(stub_server), decision())
    assert "\n" not in str(exc.value)


def test_a_chat_only_endpoint_stops_with_one_line(stub_server):
    stub_server.push(*[StubReply(404, {"error": {"message": "Not found"}})] * 3)
    with pytest.raises(ConfigError, match=r"^llm\.scoring=loglik: .* has no /completions endpoint"):
        ask(make(stub_server), decision())


def test_a_free_answer_is_completed_up_to_the_end_of_the_line(stub_server):
    stub_server.respond = lambda body: {"choices": [{"index": 0, "text": " Paris"}]}
    (reply,) = ask(make(stub_server), Request(MESSAGES[:1], seed=0))
    assert reply.text == "Answer: Paris"
    (body,) = stub_server.requests
    assert body["stop"] == ["\n"] and body["prompt"].endswith(ANSWER_CUE) and "echo" not in body


def test_the_token_budget_stops_new_calls_but_not_cached_ones(stub_server, tmp_path):
    stub_server.respond = lambda body: echoed(body, favour="red", usage=True)
    cache = tmp_path / "cache.sqlite"
    ask(make(stub_server, cache_path=cache), decision(seed=1))
    budget = make(stub_server, cache_path=cache, max_total_tokens=10)
    assert ask(budget, decision(seed=1))[0].cached  # a cached reply costs nothing
    ask(budget, decision(seed=2))  # spends more than 10 tokens
    with pytest.raises(BackendExhausted, match=r"llm\.max_total_tokens=10 spent"):
        ask(budget, decision(seed=3))
    assert budget.stats()["prompt_tokens"] > 10


def test_cost_is_reported_from_the_prices_per_million_tokens(stub_server):
    stub_server.default = StubReply(body=completion("Answer: A"))  # 11 prompt, 3 completion tokens
    backend = OpenAIBackend(stub_server.base_url, "m", price_in=2.0, price_out=10.0, **FAST)
    ask(backend, Request(MESSAGES))
    assert backend.stats()["cost"] == pytest.approx((11 * 2.0 + 3 * 10.0) / 1e6)


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("max_total_tokens", 0, "max_total_tokens=0: must be >= 1 or None"),
        ("price_in", -1.0, "price_in=-1.0: must be >= 0"),
        ("price_out", -0.5, "price_out=-0.5: must be >= 0"),
        ("scoring", "loglikelihood", "scoring='loglikelihood': must be one of"),
    ],
)
def test_bad_budget_prices_and_scoring_are_named(param, value, message):
    with pytest.raises(ValueError, match=message):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", **{param: value})


def test_tokens_are_counted_as_real_tokenizers_split_memory_lines():
    # Gemma 3's tokenizer splits this line into 29 tokens ("):" is one), SmolLM2's into 30.
    line = '- [step 57] VALID "blue" (support 3, conflicts 1): action "blue" worked for job 1'
    assert count_tokens(line) == 30
    assert count_message_tokens([{"role": "user", "content": line}]) == 34
