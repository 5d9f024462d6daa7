"""The single retrieval step every memory method shares.

A fair comparison needs one ranking for all methods, so that methods differ only in *what they keep
retrievable*. With a key, retrieval returns every kept item of that key (chronological, most recent
last: the prompt then reads like a log). Without a key, items are ranked by BM25 between the query
text and the evidence text, best `top_k` kept, then put back in chronological order.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections import Counter
from collections.abc import Iterable

from tepa.evidence import Evidence, Query

DEFAULT_TOP_K = 8
_chronological = operator.attrgetter("t", "ref")
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens: the tokenisation BM25 uses."""
    return _TOKEN.findall(text.lower())


@functools.lru_cache(maxsize=1 << 16)
def _doc_terms(doc: str) -> tuple[int, tuple[str, ...], frozenset[str]]:
    """A document's length in tokens, its tokens and its distinct tokens. Cached: text retrieval scores
    the same stored evidence query after query, and tokenising it is most of BM25's cost."""
    toks = tuple(tokenize(doc))
    return len(toks), toks, frozenset(toks)


def bm25_scores(query: str, docs: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 score of each document for the query (idf with the usual +1 smoothing)."""
    q_terms = set(tokenize(query))
    if not docs or not q_terms:
        return [0.0] * len(docs)
    terms = [_doc_terms(d) for d in docs]
    n = len(docs)
    avgdl = sum(length for length, _, _ in terms) / n or 1.0
    df = Counter(term for _, _, distinct in terms for term in distinct & q_terms)
    idf = {term: math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in q_terms}
    scores = []
    for length, toks, distinct in terms:
        if distinct.isdisjoint(q_terms):
            scores.append(0)  # what the sum below gives for a document without a query term
            continue
        tf = Counter(w for w in toks if w in q_terms)
        norm = k1 * (1.0 - b + b * length / avgdl)
        scores.append(sum(idf[w] * c * (k1 + 1.0) / (c + norm) for w, c in tf.items()))
    return scores


def rank(candidates: Iterable[Evidence], query: Query, top_k: int = DEFAULT_TOP_K) -> list[Evidence]:
    """Select and order retrievable evidence for `query` (see module docstring).

    Callers may pre-filter `candidates` to the query's key for speed; the result is the same.
    """
    key = query.key
    if key is not None:
        found = [e for e in candidates if e.key == key]
        if len(found) > 1:  # the hot path mostly sees 0 or 1 items: skip the sort call then
            found.sort(key=_chronological)
        return found
    items = list(candidates)
    if not items or top_k <= 0:
        return []
    scores = bm25_scores(query.text, [f"{e.key} {e.value} {e.text}" for e in items])
    order = sorted(range(len(items)), key=lambda i: (-scores[i], -items[i].t, -items[i].ref))
    best = [items[i] for i in order[:top_k] if scores[i] > 0.0]
    return sorted(best, key=_chronological)
