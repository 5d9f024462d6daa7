"""tepa.retrieval against a direct reference: BM25 scored document by document and a full sort.

The module scores each distinct document shape once, caches tokens per evidence item and sorts only
the items that can make the cut; scores must still be the same floats bit for bit, and rankings the
same items in the same order, ties included.
"""

from __future__ import annotations

import math
import operator
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tepa.retrieval.rank as retrieval
from tepa.evidence import Evidence, Query
from tepa.retrieval.rank import bm25_scores, rank, tokenize


def reference_bm25(query: str, docs: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """BM25 as written out for one document at a time (the implementation before shapes)."""
    q_terms = set(tokenize(query))
    if not docs or not q_terms:
        return [0.0] * len(docs)
    toks = [tokenize(d) for d in docs]
    n = len(docs)
    avgdl = sum(map(len, toks)) / n or 1.0
    df = Counter(term for t in toks for term in set(t) & q_terms)
    idf = {term: math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in q_terms}
    scores = []
    for t in toks:
        if q_terms.isdisjoint(t):
            scores.append(0)
            continue
        tf = Counter(w for w in t if w in q_terms)
        norm = k1 * (1.0 - b + b * len(t) / avgdl)
        scores.append(sum(idf[w] * c * (k1 + 1.0) / (c + norm) for w, c in tf.items()))
    return scores


def reference_rank(items: list[Evidence], query: Query, top_k: int) -> list[Evidence]:
    if query.key is not None:
        return sorted((e for e in items if e.key == query.key), key=operator.attrgetter("t", "ref"))
    if not items or top_k <= 0:
        return []
    scores = reference_bm25(query.text, [f"{e.key} {e.value} {e.text}" for e in items])
    order = sorted(range(len(items)), key=lambda i: (-scores[i], -items[i].t, -items[i].ref))
    best = [items[i] for i in order[:top_k] if scores[i] > 0.0]
    return sorted(best, key=operator.attrgetter("t", "ref"))


def exact(scores: list[float]) -> list[tuple[type, str]]:
    """Scores as (type, bits): equal floats that differ in the last bit, or 0 and 0.0, differ here."""
    return [(type(s), s.hex() if isinstance(s, float) else repr(s)) for s in scores]


WORDS = ["the", "of", "is", "capital", "France", "paris", "P36", "1", "x-y", "İstanbul"]
TEXT = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
KEYS = st.sampled_from([None, "k", 1, 1.0, True, ("France", "P36"), ("paris", 1)])
EVIDENCE = st.builds(
    Evidence,
    key=KEYS,
    value=st.sampled_from(WORDS),
    holds=st.booleans(),
    t=st.integers(0, 4),  # few values: ties on t (and on ref) are common
    text=TEXT,
    ref=st.integers(-1, 3),
)


@settings(max_examples=300, deadline=None)
@given(
    query=TEXT,
    docs=st.lists(TEXT, max_size=30),
    k1=st.sampled_from([1.5, 1.2]),
    b=st.sampled_from([0.75, 0.3]),
)
def test_bm25_scores_are_bit_identical_to_scoring_each_document(query, docs, k1, b):
    assert exact(bm25_scores(query, docs, k1, b)) == exact(reference_bm25(query, docs, k1, b))


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(EVIDENCE, max_size=30),
    dups=st.lists(st.integers(0, 29), max_size=5),
    key=KEYS,
    text=TEXT,
    top_k=st.sampled_from([0, 1, 2, 8, 100]),
)
def test_rank_matches_a_full_sort_of_direct_scores(items, dups, key, text, top_k):
    items = items + [items[i] for i in dups if i < len(items)]  # the same object twice: exact ties
    query = Query(key=key, text=text)
    want = reference_rank(items, query, top_k)
    for _ in range(2):  # the second call reads the per-item token cache
        got = rank(iter(items), query, top_k)
        assert [id(e) for e in got] == [id(e) for e in want]


def test_token_cache_stays_exact_when_it_is_emptied_and_items_are_replaced(monkeypatch):
    monkeypatch.setattr(retrieval, "_TOKENS_BY_ITEM_SIZE", 3)
    query = Query(text="red door key")
    for round_ in range(4):  # new objects every round: freed items' ids may be reused
        items = [
            Evidence(("door", i), f"red {round_ % 2 * 'key'}", True, i, "the door", ref=i) for i in range(5)
        ]
        assert rank(items, query, 2) == reference_rank(items, query, 2)
        assert len(retrieval._TOKENS_BY_ITEM) <= 5
        del items


@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_ties_at_the_cut_break_by_later_t_then_higher_ref_then_position(top_k):
    same = [
        Evidence("k", "v", True, t, "same text", ref=ref)
        for t, ref in [(1, 0), (2, 0), (2, 1), (1, 0), (0, 5)]
    ]
    query = Query(text="same")
    assert [id(e) for e in rank(same, query, top_k)] == [id(e) for e in reference_rank(same, query, top_k)]


def test_a_remembered_token_list_is_not_used_once_one_item_is_another_object():
    """Same length, same first item, equal content, one item replaced: the list memo must not answer
    for the old list (the new item's key `1.0` tokenises differently from the equal key `1`)."""
    query = Query(text="0")
    items = [Evidence(("door", i), "red", True, i, "the door", ref=i) for i in range(5)]
    assert rank(items, query, 2) == reference_rank(items, query, 2) == items[:1]
    changed = [*items[:-1], Evidence(("door", 4.0), "red", True, 4, "the door", ref=4)]
    assert changed == items  # equal tuples, but not the same objects
    got = rank(changed, query, 2)
    assert [id(e) for e in got] == [id(e) for e in reference_rank(changed, query, 2)]
    assert [id(e) for e in got] == [id(changed[0]), id(changed[-1])]


def test_remembered_scores_are_used_only_for_the_same_documents():
    """One question asked over two memories in turn, each twice: the scores memo (per query text) must
    answer with the scores of the documents asked, not those it remembered last."""
    query = Query(text="capital paris")
    small = [Evidence(("France", "P36"), "Paris", True, 0, "capital", ref=0)]
    large = small + [Evidence(("Texas", "P36"), "Austin", True, i, "capital", ref=i) for i in range(1, 4)]
    other = [Evidence(("Paris", "P17"), "France", True, i, "paris paris", ref=i) for i in range(4)]
    for items in (small, large, other, large, small, other):
        for _ in range(2):
            got = rank(list(items), query, 2)
            assert [id(e) for e in got] == [id(e) for e in reference_rank(items, query, 2)]


def test_remembered_token_lists_and_scores_are_emptied_when_full(monkeypatch):
    monkeypatch.setattr(retrieval, "_TOKENS_BY_LIST_SIZE", 2)
    monkeypatch.setattr(retrieval, "_SCORES_BY_QUERY_SIZE", 2)
    for round_ in range(6):
        items = [Evidence(("k", round_), f"v{i}", True, i, "text", ref=i) for i in range(3)]
        query = Query(text=f"v{round_ % 3} text")
        assert rank(items, query, 2) == reference_rank(items, query, 2)
        assert len(retrieval._TOKENS_BY_LIST) <= 2 and len(retrieval._SCORES_BY_QUERY) <= 2
