"""The single retrieval step every memory method shares.

A fair comparison needs one ranking for all methods, so that methods differ only in *what they keep
retrievable*. With a key, retrieval returns every kept item of that key (chronological, most recent
last: the prompt then reads like a log). Without a key, items are ranked by BM25 between the query
text and the evidence text, best `top_k` kept, then put back in chronological order.

Deployed memories do not know a question's key: they rank what they hold by similarity to the query
text. The retrieval modes (`MODES`) other than `keyed` do that for every method: the agent loop asks
`similarity_query(...)`, which drops the key and carries a `Ranker` (BM25, or cosine similarity of
embeddings) that scores each item's `document`, the text a deployed memory would store (never the key).
"""

from __future__ import annotations

import functools
import heapq
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from itertools import count, repeat

import numpy as np

from tepa.evidence import Evidence, Query, Ranker

DEFAULT_TOP_K = 8
#: Retrieval modes: `keyed` (a task's key selects its items; the default), or top-k by similarity to
#: the query text, ignoring the key: `bm25`, or `dense` (cosine similarity of text embeddings).
MODES = ("keyed", "bm25", "dense")
_chronological = operator.attrgetter("t", "ref")
_TEXT, _T, _REF = operator.attrgetter("text"), operator.attrgetter("t"), operator.attrgetter("ref")
_TOKEN = re.compile(r"[a-z0-9]+")
_TOKENS_BY_LIST: dict[tuple[int, int], tuple[list[Evidence], list[tuple[str, ...]]]] = {}  # _evidence_tokens
_TOKENS_BY_LIST_SIZE = 32
_TOKENS_BY_ITEM: dict[int, tuple[Evidence, tuple[str, ...]]] = {}  # see _item_tokens
_TOKENS_BY_ITEM_SIZE = 1 << 19
_SCORES_BY_QUERY: dict[str, tuple[list[tuple[str, ...]], list[float]]] = {}  # see _query_scores
_SCORES_BY_QUERY_SIZE = 64
_second = operator.itemgetter(1)
_Shape = tuple[int, tuple[str, ...]]  # a document's length and its query-term tokens, in document order


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens: the tokenisation BM25 uses."""
    return _TOKEN.findall(text.lower())


@functools.lru_cache(maxsize=1 << 16)
def _doc_tokens(doc: str) -> tuple[str, ...]:
    """A document's tokens. Cached: text retrieval scores the same stored evidence query after query."""
    return tuple(tokenize(doc))


def _evidence_tokens(items: list[Evidence]) -> list[tuple[str, ...]]:
    """The tokens of each item's document (key, value and text); `items` is not empty.

    A memory whose content does not change between queries (every question of MemoryAgentBench) hands
    the same items in the same order again, so the tokens of the last lists asked are remembered whole,
    keyed by their length and first item and used when every item is the same object (each entry
    holds its items, so their ids are theirs, and items are immutable tuples, so their tokens cannot
    go stale). Otherwise each item's tokens come from `_item_tokens`. Callers must not modify the
    returned list.
    """
    whole = (len(items), id(items[0]))
    found = _TOKENS_BY_LIST.get(whole)
    if found is not None and all(map(operator.is_, found[0], items)):
        return found[1]
    tokens = _item_tokens(items)
    if len(_TOKENS_BY_LIST) >= _TOKENS_BY_LIST_SIZE:
        _TOKENS_BY_LIST.clear()
    _TOKENS_BY_LIST[whole] = (items, tokens)
    return tokens


def _item_tokens(items: list[Evidence]) -> list[tuple[str, ...]]:
    """The tokens of each item's document, cached by the item's identity.

    Memories hand the same Evidence objects to query after query, also when some items changed, and
    building each document's text (`str` of a tuple key) cost more than scoring it. Each entry holds
    its item, so an id found in the cache is that item's (a live object's id is unique), and items are
    immutable tuples, so their tokens cannot go stale. The cache is emptied when full; misses, built
    in one pass, still find the document's tokens in `_doc_tokens`.
    """
    cache = _TOKENS_BY_ITEM
    found = list(map(cache.get, map(id, items)))
    if None in found:
        if len(cache) + len(items) > _TOKENS_BY_ITEM_SIZE:
            cache.clear()
            missing = items
        else:
            missing = [e for e, entry in zip(items, found, strict=True) if entry is None]
        docs = [f"{e.key} {e.value} {e.text}" for e in missing]
        cache.update(zip(map(id, missing), zip(missing, map(_doc_tokens, docs), strict=True), strict=True))
        found = list(map(cache.get, map(id, items)))
    return list(map(_second, found))


def bm25_scores(query: str, docs: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 score of each document for the query (idf with the usual +1 smoothing)."""
    return _bm25(query, [_doc_tokens(d) for d in docs], k1, b)


def _bm25(query: str, docs: list[tuple[str, ...]], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """`bm25_scores` of tokenised documents.

    A document's score depends only on its length and its query-term tokens in document order (its
    *shape*), and a large memory of templated facts has few shapes: each is scored once per call, with
    the same float operations in the same order as scoring every document on its own.
    """
    q_terms = set(tokenize(query))
    if not docs or not q_terms:
        return [0.0] * len(docs)
    lengths = list(map(len, docs))
    avgdl = sum(lengths) / len(docs) or 1.0
    hits = map(tuple, map(filter, repeat(q_terms.__contains__), docs))
    first: dict[_Shape, int] = {}  # shape -> index of its first document, the shape's id
    shape_of = list(map(first.setdefault, zip(lengths, hits, strict=True), count()))  # as first indices
    idf = _idf(q_terms, first, Counter(shape_of), len(docs))
    score = {i: _shape_score(shape, idf, avgdl, k1, b) for shape, i in first.items()}
    return list(map(score.__getitem__, shape_of))


def _query_scores(query: str, docs: list[tuple[str, ...]]) -> list[float]:
    """`_bm25` of `query` over `docs`, remembered per query text with the documents it scored.

    The streams of one run (one per seed) often hold the same documents and ask the same questions:
    what a memory keeps of MemoryAgentBench's facts does not depend on the seed, and scoring its 18k
    facts was most of a question's cost. A remembered result is used only for equal documents, so it
    cannot go stale; the check is cheap because equal documents are mostly the same token tuples
    (`_doc_tokens`), which compare by identity. The memo is emptied when full. Callers must not
    modify the returned list.
    """
    found = _SCORES_BY_QUERY.get(query)
    if found is not None and found[0] == docs:
        return found[1]
    scores = _bm25(query, docs)
    if len(_SCORES_BY_QUERY) >= _SCORES_BY_QUERY_SIZE:
        _SCORES_BY_QUERY.clear()
    _SCORES_BY_QUERY[query] = (docs, scores)
    return scores


def _idf(q_terms: set[str], first: dict[_Shape, int], n_docs: Counter, n: int) -> dict[str, float]:
    """Smoothed idf of each query term, with document frequencies counted per shape (`first`: shape ->
    id; `n_docs`: id -> its number of documents) rather than per document."""
    df: Counter = Counter()
    for (_, hits), i in first.items():
        for term in set(hits):
            df[term] += n_docs[i]
    return {term: math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in q_terms}


def _shape_score(shape: _Shape, idf: dict[str, float], avgdl: float, k1: float, b: float) -> float:
    """BM25 of a document of this shape: term frequencies in order of first occurrence, summed in that
    order (the order scoring the document itself would use, so the float is the same)."""
    length, hits = shape
    if not hits:
        return 0  # what the sum below gives for a document without a query term
    norm = k1 * (1.0 - b + b * length / avgdl)
    return sum(idf[w] * c * (k1 + 1.0) / (c + norm) for w, c in Counter(hits).items())


def document(e: Evidence) -> str:
    """What a similarity retrieval compares with the query: the item's text as a deployed memory would
    store it (its value when it has no text). Never its key: that is what such a memory does not know."""
    return e.text or e.value


def _documents(items: list[Evidence]) -> list[str]:
    """`document` of every item, mapped in C (a similarity query reads every item a memory holds)."""
    docs = list(map(_TEXT, items))
    return docs if "" not in docs else list(map(document, items))


def similarity_query(key: Hashable | None, text: str, t: int, ranker: Ranker | None) -> Query:
    """The query the agent loop asks: by key (`ranker` None, the `keyed` mode), or by similarity of
    `text` under `ranker`, without the key, so that every method hands all its retrievable items."""
    return Query(key, text, t) if ranker is None else Query(None, text, t, ranker)


class BM25Ranker:
    """The `bm25` mode: Okapi BM25 between the query text and each item's `document`."""

    positive_only = True

    def scores(self, query: str, docs: list[str]) -> np.ndarray:
        return np.asarray(bm25_scores(query, docs), dtype=float)


class DenseRanker:
    """The `dense` mode: cosine similarity of embeddings (`embed` returns unit-norm rows, one per text).

    Memory texts repeat (templated observations, the same stored items query after query), so each
    distinct text is embedded once, when first seen, and its vector kept as a row of one matrix; a
    query maps its documents to rows (one dictionary lookup each) and reads their scores from the
    query's vector of scores, filled in the first time a row is asked for. A score is the sum of the
    two vectors' products, computed row by row (`_cosines`), so it depends only on the two texts:
    never on which other documents a query scores, nor on the order texts were first seen in.
    """

    positive_only = False
    _QUERIES_SIZE = 256  # remembered score vectors: a stream asks the same few questions again and again

    def __init__(self, embed: Callable[[list[str]], np.ndarray]) -> None:
        self._embed = embed
        self._row: dict[str, int] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._by_query: dict[int, np.ndarray] = {}  # query row -> score of each row (NaN: not yet asked)

    def _add(self, texts: list[str]) -> None:
        """Embed the texts not seen yet, in one call, in order of first occurrence."""
        new = list(dict.fromkeys(t for t in texts if t not in self._row))
        if not new:
            return
        vectors = np.asarray(self._embed(new), dtype=np.float32)
        n = len(self._row)
        if n + len(new) > len(self._matrix):  # grow by doubling: texts arrive a few at a time
            grown = np.zeros((max(2 * len(self._matrix), n + len(new), 64), vectors.shape[1]), np.float32)
            if n:
                grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._matrix[n : n + len(new)] = vectors
        self._row.update(zip(new, range(n, n + len(new)), strict=True))

    def scores(self, query: str, docs: list[str]) -> np.ndarray:
        row, n = self._row.get, len(docs)
        try:
            q, rows = row(query), np.fromiter(map(row, docs), np.intp, n)
        except TypeError:  # a document not seen yet (None): embed the new texts, query first, then again
            self._add([query, *docs])
            q, rows = row(query), np.fromiter(map(row, docs), np.intp, n)
        if q is None:
            self._add([query])
            q = row(query)
        known = self._by_query.get(q)
        if known is None or len(known) < len(self._row):
            known = self._grown(q, known)
        sims = known[rows]
        unasked = np.isnan(sims)
        if unasked.any():
            need = np.unique(rows[unasked])
            known[need] = _cosines(self._matrix[need], self._matrix[q])
            sims = known[rows]
        return sims.astype(float)

    def _grown(self, q: int, known: np.ndarray | None) -> np.ndarray:
        """The query's score vector, sized to the matrix (new rows NaN), remembered."""
        grown = np.full(len(self._matrix), np.nan, dtype=np.float32)
        if known is None:
            if len(self._by_query) >= self._QUERIES_SIZE:
                self._by_query.clear()
        else:
            grown[: len(known)] = known
        self._by_query[q] = grown
        return grown


def _cosines(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with `query`, as an elementwise product summed along the row: the sum of a
    row is the same whatever rows stand beside it (a matrix product's need not be)."""
    return np.multiply(rows, query).sum(axis=1)


def rank(
    candidates: Iterable[Evidence], query: Query, top_k: int = DEFAULT_TOP_K, ordered: bool = False
) -> list[Evidence]:
    """Select and order retrievable evidence for `query` (see module docstring).

    Callers may pre-filter `candidates` to the query's key for speed; the result is the same. A caller
    whose candidates are already in chronological order (by `t`, then `ref`) says so with `ordered`:
    a keyed query then keeps them in that order instead of sorting them again.
    """
    key = query.key
    if key is not None:
        found = [e for e in candidates if e.key == key]
        if len(found) > 1 and not ordered:  # the hot path mostly sees 0 or 1 items: skip the sort call then
            found.sort(key=_chronological)
        return found
    items = list(candidates)
    if not items or top_k <= 0:
        return []
    ranker = query.ranker
    if ranker is None:
        picked = _top(_query_scores(query.text, _evidence_tokens(items)), items, top_k)
    else:
        picked = _top_of(ranker.scores(query.text, _documents(items)), items, top_k, ranker.positive_only)
    return sorted([items[i] for i in picked], key=_chronological)


def _top_of(scores: np.ndarray, items: list[Evidence], top_k: int, positive_only: bool) -> list[int]:
    """`_top` of a ranker's scores (an array; `positive_only`: an item must score above 0), the same
    order: higher score first, then later `t`, then higher `ref`, then earlier position."""
    n = len(scores)
    cut = np.partition(scores, n - min(top_k, n))[n - min(top_k, n)]
    picked = np.flatnonzero((scores >= cut) & (scores > 0.0) if positive_only else scores >= cut)
    if len(picked) == 0:
        return []
    chosen = operator.itemgetter(*picked.tolist())(items) if len(picked) > 1 else (items[picked[0]],)
    t = np.fromiter(map(_T, chosen), np.int64, len(chosen))
    ref = np.fromiter(map(_REF, chosen), np.int64, len(chosen))
    order = np.lexsort((picked, -ref, -t, -scores[picked]))
    return picked[order[:top_k]].tolist()


def _top(scores: list[float], items: list[Evidence], top_k: int) -> list[int]:
    """Indices of the best `top_k` positive scores: higher score first, then later `t`, then higher
    `ref`, then earlier position. Only items scoring at least the k-th best score can be among them, so
    only those are sorted rather than the whole memory."""
    cut = heapq.nlargest(top_k, scores)[-1]
    if cut > 0.0:
        picked = [i for i, s in enumerate(scores) if s >= cut]
    else:
        picked = [i for i, s in enumerate(scores) if s > 0.0]
    picked.sort(key=lambda i: (-scores[i], -items[i].t, -items[i].ref))
    return picked[:top_k]
