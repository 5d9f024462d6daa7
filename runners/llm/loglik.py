"""Multiple choice by log-likelihood: each option is scored by the summed log-probability of its text as
the continuation of a completion-style prompt (as lm-evaluation-harness scores multiple choice).

Scoring the option *letter* makes a tiny model pick the same letter whatever its memory says; scoring the
option's own text makes it follow what the prompt shows. The endpoint must return the log-probability of
every prompt token (`echo` with `logprobs` on /v1/completions: vLLM, OpenAI's legacy completions,
llama-cpp-python's server with a model loaded with all logits); `option_loglik` says when it did not.

An option that is one token can also be read from one request's next-token alternatives
(`next_token_logprobs`): the same number, without a request per option.

The chosen option is the highest sum (ties: the first shown). The reply logs every option's sum and its
mean per token (the length-normalised score) beside the answer, so a log shows how close the choice was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class NoPromptLogprobs(ValueError):
    """The endpoint's completion carries no log-probabilities for the prompt's tokens."""


@dataclass(frozen=True, slots=True)
class OptionScore:
    """An option's summed log-probability and the number of tokens it spans."""

    loglik: float
    tokens: int

    @property
    def per_token(self) -> float:
        return self.loglik / self.tokens


def continuation(option: str) -> str:
    """What follows the prompt's answer cue when the model names `option`."""
    return f" {option}"


def option_loglik(choice: Mapping[str, object], prompt: str, start: int) -> OptionScore:
    """The log-probability of `prompt[start:]` from one echoed completion choice.

    A token counts when it ends after `start` (so a token that straddles the boundary counts) and starts
    before the end of the prompt (the generated token does not). Raises NoPromptLogprobs when the choice
    does not echo the prompt with a log-probability for each of those tokens."""
    logprobs = choice.get("logprobs")
    text = choice.get("text")
    if not isinstance(logprobs, Mapping) or not isinstance(text, str) or not text.startswith(prompt):
        raise NoPromptLogprobs("the reply does not echo the prompt with log-probabilities")
    tokens, values, offsets = (logprobs.get(k) for k in ("tokens", "token_logprobs", "text_offset"))
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(offsets, list)):
        raise NoPromptLogprobs("the reply's logprobs lack tokens, token_logprobs or text_offset")
    if not len(tokens) == len(values) == len(offsets) or not all(isinstance(o, int) for o in offsets):
        raise NoPromptLogprobs("the reply's logprobs are not aligned")
    ends = [*offsets[1:], len(text)]
    total, count = 0.0, 0
    for begin, end, value in zip(offsets, ends, values, strict=True):
        if end > start and begin < len(prompt):
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise NoPromptLogprobs("a prompt token has no log-probability")
            total += float(value)
            count += 1
    if count == 0:
        raise NoPromptLogprobs("no token of the option was scored")
    return OptionScore(total, count)


def next_token_logprobs(choice: Mapping[str, object]) -> dict[str, float]:
    """The next token's alternatives (token text -> log-probability) from a completion choice of one
    token asked with `logprobs` and no echo (the legacy completions' `top_logprobs[0]`). Raises
    NoPromptLogprobs when the choice carries none."""
    logprobs = choice.get("logprobs")
    top = logprobs.get("top_logprobs") if isinstance(logprobs, Mapping) else None
    if not isinstance(top, list) or not top or not isinstance(top[0], Mapping):
        raise NoPromptLogprobs("the reply carries no top log-probabilities for the next token")
    return {
        str(token): float(value)
        for token, value in top[0].items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def choose(labels: Sequence[str], scores: Sequence[OptionScore], order: Sequence[int] | None = None) -> str:
    """The reply for the best-scoring option: its label, then every option's summed and per-token score.
    Ties go to the option earliest in `order` (default: the first shown)."""
    rank = {i: r for r, i in enumerate(range(len(scores)) if order is None else order)}
    best = max(range(len(scores)), key=lambda i: (scores[i].loglik, -rank[i]))
    sums = " ".join(f"{lab}={s.loglik:.3f}" for lab, s in zip(labels, scores, strict=True))
    means = " ".join(f"{lab}={s.per_token:.3f}" for lab, s in zip(labels, scores, strict=True))
    return f"Answer: {labels[best]} | loglik {sums} | per-token {means}"
