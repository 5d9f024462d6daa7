"""The debiased scoring modes (`llm.scoring=permuted|calibrated|cloze`) and the prefix-first prompt,
against the loopback stub endpoint: an endpoint with a position bias, a value prior and a pull towards
what memory names, each scored exactly, so each mode's choice is known in advance."""

from __future__ import annotations

import asyncio
import re

import pytest

from envs.base import Task
from runners.agent.prompt import LABELS, NAME_INSTRUCTION, labels_for, render
from runners.config import ConfigError
from runners.llm.backend import Request, total_stats
from runners.llm.openai_backend import OpenAIBackend, planned_cost
from runners.llm.scoring import SCORINGS, as_completion_prompt, prefix_first, rotations, split_decision
from tepa.evidence import Evidence
from tests.helpers.hostile import run

OPTIONS = ("red", "blue", "green")
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "timeout": 5.0, "max_retries": 1}
OPTION_MODES = [mode for mode, scored in SCORINGS.items() if scored]


def decision(options=OPTIONS, remembered: str | None = None, seed: int = 0, t: int = 9) -> Request:
    task = Task(key=1, text="Job 1: pick the action that completes it.", phase="stable", t=t, options=options)
    said = f'"{remembered}" worked'
    lines = [] if remembered is None else [Evidence(1, remembered, True, s, said, "outcome") for s in (2, 5)]
    return Request(render(task, lines), seed=seed, labels=labels_for(task), options=tuple(options))


def biased(
    first: float = 0.0,
    prior: dict[str, float] | None = None,
    memory: float = 0.0,
    multi_token: frozenset[str] = frozenset(),
):
    """An echo endpoint scoring the answer (the text after the last "Answer:") as one token: `first` if
    it is the option listed first, plus its `prior`, plus `memory` if a memory line names it; the
    usage reports how many prompt tokens its cache held (all but the last line). Asked for the next
    token's alternatives (no echo), it lists the `logprobs` likeliest of OPTIONS and "x" with the same
    scores, leaving out the names in `multi_token` (as a tokenizer that splits them would)."""

    def score(prompt: str, answer: str) -> float:
        listed = re.search(r"^A\) (.*)$", prompt, re.MULTILINE)
        value = (prior or {}).get(answer, 0.0) - 5.0
        value += first if listed and listed.group(1) == answer else 0.0
        value += memory if re.search(rf'^- \[step \d+\] VALID "{answer}"', prompt, re.MULTILINE) else 0.0
        return value

    def respond(body: dict) -> dict:
        prompt = body["prompt"]
        usage = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 8}}
        if not body.get("echo"):
            names = [n for n in (*OPTIONS, "x") if n not in multi_token]
            top = sorted(((f" {n}", score(prompt, n)) for n in names), key=lambda kv: -kv[1])
            top = dict(top[: body["logprobs"]])
            logprobs = {"tokens": [" x"], "token_logprobs": [-1.0], "top_logprobs": [top], "text_offset": [0]}
            return {"choices": [{"index": 0, "text": " x", "logprobs": logprobs}], "usage": usage}
        cut = prompt.rindex("Answer:") + len("Answer:")
        answer = prompt[cut:].strip()
        tokens, offsets = [prompt[:cut], prompt[cut:], " x"], [0, cut, len(prompt)]
        return {
            "choices": [
                {
                    "index": 0,
                    "text": prompt + " x",
                    "logprobs": {
                        "tokens": tokens,
                        "token_logprobs": [None, score(prompt, answer), -1.0],
                        "text_offset": offsets,
                    },
                }
            ],
            "usage": usage,
        }

    return respond


def ask(stub, scoring: str, *requests: Request, **settings: object) -> tuple[list, OpenAIBackend]:
    backend = OpenAIBackend(stub.base_url, "stub-model", scoring=scoring, **FAST, **settings)

    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    return asyncio.run(go()), backend


def chosen(reply, request: Request) -> str:
    return request.options[LABELS.index(reply.text.split()[1])]


# --- the prefix-first prompt ------------------------------------------------------------------------


def test_the_prompt_puts_instructions_and_memory_first_and_loses_no_line():
    request = decision(remembered="blue")
    system, split = as_completion_prompt(request.messages)
    prompt = prefix_first(system, split, OPTIONS)
    lines = prompt.split("\n")
    step = lines.index(next(line for line in lines if line.startswith("Step 9.")))
    memory = [i for i, line in enumerate(lines) if line.startswith("- [step ")]
    assert lines[0] == system and len(memory) == 2 and max(memory) < step
    assert lines[-3:] == ["C) green", NAME_INSTRUCTION, "Answer:"]
    rendered = request.messages[1]["content"].split("\n")
    kept = {line for line in rendered if not line.startswith(("Memory (", "Reply with"))}
    assert kept <= set(lines)


def test_two_decisions_of_a_stream_share_everything_up_to_the_step_line():
    a, b = (as_completion_prompt(decision(("blue", "red", "green"), "blue", t=t).messages) for t in (9, 10))
    first, second = prefix_first(*a, a[1].options), prefix_first(*b, b[1].options)
    shared = len(first[: first.index("Step 9.")])
    assert first[:shared] == second[:shared] and first[shared:] != second[shared:]


def test_a_message_with_lines_it_does_not_know_is_not_split():
    assert split_decision("Step 1. x\nOptions:\nA) red\nnot an option\n") is None
    assert split_decision("Step 1. x\nReply as an answer.") is None


def test_rotations_show_every_option_once_at_every_position():
    orders = rotations(OPTIONS)
    assert orders[0] == OPTIONS and len(orders) == 3
    assert all(sorted(o[p] for o in orders) == sorted(OPTIONS) for p in range(3))


# --- each mode against a biased endpoint --------------------------------------------------------------


def test_loglik_follows_position_and_permuted_averages_it_out(stub_server):
    """First position +2, green +1: loglik picks whatever is listed first, permuted picks green."""
    stub_server.respond = biased(first=2.0, prior={"green": 1.0})
    requests = [decision(order) for order in rotations(OPTIONS)]
    replies, _ = ask(stub_server, "loglik", *requests)
    assert [chosen(r, q) for r, q in zip(replies, requests, strict=True)] == [q.options[0] for q in requests]
    stub_server.requests.clear()
    replies, backend = ask(stub_server, "permuted", *requests)
    assert [chosen(r, q) for r, q in zip(replies, requests, strict=True)] == ["green"] * 3
    assert len(stub_server.requests) == 3 * 9  # 3 rotations x 3 options per decision
    # one decision's rotations: each option once at each position
    firsts = [re.search(r"^A\) (.*)$", r["prompt"], re.MULTILINE).group(1) for r in stub_server.requests[:9]]
    assert sorted(firsts) == sorted(OPTIONS * 3)
    assert backend.stats()["scoring"] == "permuted"


def test_calibrated_subtracts_the_prior_and_keeps_what_memory_adds(stub_server):
    """A strong prior for red (+4) outweighs memory's pull (+3) under loglik; calibrated follows memory."""
    stub_server.respond = biased(prior={"red": 4.0}, memory=3.0)
    request = decision(("blue", "red", "green"), remembered="green")
    (reply,), _ = ask(stub_server, "loglik", request)
    assert chosen(reply, request) == "red"
    stub_server.requests.clear()
    (reply,), _ = ask(stub_server, "calibrated", request)
    assert chosen(reply, request) == "green"
    prompts = [r["prompt"] for r in stub_server.requests]
    assert len(prompts) == 6 and sum('VALID "green"' in p for p in prompts) == 3  # 3 with memory, 3 without


def test_calibrated_without_memory_breaks_ties_neither_by_position_nor_the_same_way_every_time(stub_server):
    stub_server.respond = biased(first=3.0, prior={"red": 2.0})
    requests = [decision(order, seed=seed) for seed in range(12) for order in rotations(OPTIONS)]
    replies, _ = ask(stub_server, "calibrated", *requests)
    picks = [chosen(r, q) for r, q in zip(replies, requests, strict=True)]
    positions = [q.options.index(p) for p, q in zip(picks, requests, strict=True)]
    assert all(" loglik A=0.000 B=0.000 C=0.000 " in r.text for r in replies)
    assert stub_server.requests == []  # with no memory both prompts are the same: nothing is asked
    assert 0.1 < positions.count(0) / len(positions) < 0.6
    assert 0.1 < picks.count("red") / len(picks) < 0.6


def test_cloze_lists_no_options_and_scores_each_as_the_answer(stub_server):
    stub_server.respond = biased(first=5.0, prior={"blue": 1.0})
    request = decision(("green", "red", "blue"))
    (reply,), _ = ask(stub_server, "cloze", request)
    assert chosen(reply, request) == "blue"
    prompts = [r["prompt"] for r in stub_server.requests]
    assert len(prompts) == 3 and not any(re.search(r"^[A-C]\) ", p, re.MULTILINE) for p in prompts)


@pytest.mark.parametrize("scoring", OPTION_MODES)
def test_the_server_count_of_cached_prompt_tokens_is_in_the_stats(stub_server, scoring):
    stub_server.respond = biased()
    _, backend = ask(stub_server, scoring, decision(remembered="red"))
    stats = backend.stats()
    sent = {"loglik": 3, "permuted": 9, "calibrated": 6, "cloze": 3}[scoring] * 10
    assert stats["server_counted_prompt_tokens"] == stats["prompt_tokens"] == sent
    assert stats["evaluated_prompt_share"] == pytest.approx(0.2)


@pytest.mark.parametrize("scoring", OPTION_MODES)
def test_the_plan_counts_the_requests_each_mode_sends(scoring):
    calls, prompt, _ = planned_cost(decision(remembered="red"), scoring, 16)
    assert calls == {"loglik": 3, "permuted": 9, "calibrated": 6, "cloze": 3}[scoring]
    assert prompt > calls * 20
    assert planned_cost(decision(), scoring, 16)[0] == (0 if scoring == "calibrated" else calls)


# --- one request per prompt (llm.option_logprobs) -----------------------------------------------------

PER_DECISION = {"loglik": 1, "permuted": 3, "calibrated": 2, "cloze": 1}


@pytest.mark.parametrize("scoring", OPTION_MODES)
def test_one_request_per_prompt_gives_every_option_the_score_its_own_request_gives(stub_server, scoring):
    stub_server.respond = biased(first=2.0, prior={"green": 1.0}, memory=1.5)
    requests = [decision(order, remembered=order[1]) for order in rotations(OPTIONS)]
    each, _ = ask(stub_server, scoring, *requests)
    stub_server.requests.clear()
    shared, backend = ask(stub_server, scoring, *requests, option_logprobs=5)
    assert [r.text for r in shared] == [r.text for r in each]
    assert len(stub_server.requests) == PER_DECISION[scoring] * len(requests)
    assert not any(r.get("echo") for r in stub_server.requests)
    assert backend.stats()["option_fallbacks"] == 0
    assert backend.stats()["prompt_tokens"] == 10 * len(stub_server.requests)


@pytest.mark.parametrize("limit", [1, 5])
def test_an_option_missing_from_the_alternatives_is_scored_by_its_own_request(stub_server, limit):
    """green is not one token (never listed); with 1 alternative asked, the options behind the first
    are missing as well: each missing option costs one echoed request, and the reply is unchanged."""
    stub_server.respond = biased(prior={"red": 0.5}, memory=3.0, multi_token=frozenset({"green"}))
    request = decision(("blue", "red", "green"), remembered="green")
    (each,), _ = ask(stub_server, "calibrated", request)
    stub_server.requests.clear()
    (shared,), backend = ask(stub_server, "calibrated", request, option_logprobs=limit)
    echoed = [r for r in stub_server.requests if r.get("echo")]
    missing = {1: 4, 5: 2}[limit]  # of the 6 (prompt, option) pairs
    assert shared.text == each.text and chosen(shared, request) == "green"
    assert len(echoed) == backend.stats()["option_fallbacks"] == missing
    assert len(stub_server.requests) == 2 + missing


def test_the_cache_key_names_how_options_are_scored_and_a_rerun_asks_nothing(stub_server, tmp_path):
    stub_server.respond = biased(memory=1.0)
    request = decision(remembered="blue")
    cache = {"cache_path": tmp_path / "cache.sqlite"}
    ask(stub_server, "calibrated", request, **cache)
    (reply,), backend = ask(stub_server, "calibrated", request, option_logprobs=5, **cache)
    assert not reply.cached and backend.stats()["cache_misses"] == 1
    stub_server.requests.clear()
    (again,), _ = ask(stub_server, "calibrated", request, option_logprobs=5, **cache)
    assert again.cached and again.text == reply.text and stub_server.requests == []


def test_an_endpoint_without_next_token_alternatives_stops_the_run_naming_option_logprobs(stub_server):
    stub_server.respond = lambda body: {"choices": [{"index": 0, "text": " red", "logprobs": None}]}
    with pytest.raises(ConfigError, match=r"^llm\.scoring=calibrated: .* no next-token .*option_logprobs=0"):
        ask(stub_server, "calibrated", decision(remembered="red"), option_logprobs=5)


@pytest.mark.parametrize("scoring", OPTION_MODES)
def test_the_plan_counts_one_request_per_prompt_with_option_logprobs(scoring):
    calls, prompt, completion = planned_cost(decision(remembered="red"), scoring, 16, option_logprobs=5)
    assert calls == completion == PER_DECISION[scoring]
    assert prompt > calls * 20
    assert planned_cost(decision(), scoring, 16, 5)[0] == (0 if scoring == "calibrated" else calls)


@pytest.mark.parametrize("value", [-1, 1001])
def test_option_logprobs_out_of_range_is_refused_naming_it(value):
    with pytest.raises(ValueError, match=r"^option_logprobs=.*: must be in \[0, 1000\]"):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", scoring="calibrated", option_logprobs=value)


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scoring", OPTION_MODES)
def test_an_endpoint_without_prompt_logprobs_stops_the_run_with_one_line_naming_what_to_use(
    stub_server, scoring
):
    stub_server.respond = lambda body: {"choices": [{"index": 0, "text": " red", "logprobs": None}]}
    with pytest.raises(
        ConfigError, match=rf"^llm\.scoring={scoring}: .* use llm\.scoring=logprobs or text$"
    ) as exc:
        ask(stub_server, scoring, decision(remembered="red"))
    assert "\n" not in str(exc.value)


def test_an_unknown_mode_is_a_config_error_naming_llm_scoring(tmp_path):
    with pytest.raises(ConfigError, match=r"^llm\.scoring='nope': must be one of text, logprobs, loglik, "):
        run(tmp_path, "llm=local_gemma", "llm.scoring=nope")
    assert not (tmp_path / "runs").exists()


def test_a_resumed_stream_reports_the_evaluated_share_of_all_its_invocations():
    first = {"server_cached_tokens": 80, "server_counted_prompt_tokens": 100, "evaluated_prompt_share": 0.2}
    later = {"server_cached_tokens": 10, "server_counted_prompt_tokens": 100, "evaluated_prompt_share": 0.9}
    total = total_stats(first, later)
    assert total["server_counted_prompt_tokens"] == 200 and total["evaluated_prompt_share"] == 0.55
