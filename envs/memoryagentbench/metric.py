"""MemoryAgentBench's answer metric for FactConsolidation: substring exact match.

Reproduced from the upstream evaluation (SQuAD-style normalisation, `utils/eval_other_utils.py`) so that
our numbers are scored exactly like the published ones:

- normalise: lowercase; delete every ASCII punctuation character (no space is inserted, so
  "Washington, D.C." becomes "washington dc"); replace the words a / an / the with a space; collapse
  whitespace;
- a prediction is correct when some normalised gold is a substring of the normalised prediction;
- upstream scores both the raw output and the answer extracted from it (the text after the first
  "Answer:" up to the end of that line, else the first line) and keeps the better score.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_AFTER_ANSWER = re.compile(r"Answer:(.*)(?:\n|$)", re.IGNORECASE)
_FIRST_LINE = re.compile(r"^(.*)(?:\n|$)")
_ANSWER_PREFIX = re.compile(r"^Answer:", re.IGNORECASE)


def normalize_answer(s: str) -> str:
    """Upstream normalisation: lowercase, drop punctuation, articles to spaces, collapse whitespace."""
    text = s.lower().translate(_DELETE_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(prediction: str) -> str:
    """The answer upstream extracts from a model's output: the rest of the line after the first
    "Answer:" (case-insensitive), else the first line, stripped."""
    match = _AFTER_ANSWER.search(prediction) or _FIRST_LINE.search(prediction)
    return _ANSWER_PREFIX.sub("", match.group(1).strip()).strip()


def substring_exact_match(prediction: str, golds: str | Iterable[str]) -> bool:
    """True when a normalised gold occurs in the normalised prediction (raw or extracted answer).

    `golds` is one gold string or any number of them (correct if any matches).
    """
    gold_list = [golds] if isinstance(golds, str) else list(golds)
    if not gold_list:
        raise ValueError("golds: need at least one gold answer")
    normalised_golds = [normalize_answer(g) for g in gold_list]
    for candidate in (prediction, extract_answer(prediction)):
        normalised = normalize_answer(candidate)
        if any(g in normalised for g in normalised_golds):
            return True
    return False
