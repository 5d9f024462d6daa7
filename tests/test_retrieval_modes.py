"""The retrieval switch (`retrieval=keyed|bm25|dense`): keyed leaves streams as they were; the similarity
modes rank every item a method keeps retrievable against the query text, ignoring the key."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from runners.compose import CONF_DIR, compose_config
from runners.config import ConfigError
from runners.embed.retrieval import check_retrieval
from runners.registry import build_memory, memory_names
from runners.store.identity import stream_identity, variant_of
from tepa.evidence import Evidence, Observation
from tepa.retrieval.rank import BM25Ranker, DenseRanker, document, rank, similarity_query
from tests.helpers.embeddings import vector


def _observe_two_users(memory) -> None:
    """Two users' seat preferences, each confirmed a few times (enough for TEPA to promote them)."""
    for t in range(6):
        memory.observe(Observation((1, "seat"), "aisle", True, 2 * t, 'user 1 prefers "aisle" seats', "hint"))
        memory.observe(
            Observation((2, "seat"), "window", True, 2 * t + 1, 'user 2 prefers "window" seats', "hint")
        )


def test_keyed_retrieval_leaves_a_streams_identity_and_logged_config_as_they_were(compose):
    plain, keyed = compose("memory=lww"), compose("memory=lww", "retrieval=keyed")
    assert stream_identity(plain, 0, None, None) == stream_identity(keyed, 0, None, None)
    assert "retrieval" not in stream_identity(keyed, 0, None, None)
    assert "retrieval" not in keyed.config
    assert plain.retrieval.ranker() is None


def test_a_similarity_query_drops_the_key_and_keyed_one_keeps_it():
    ranker = BM25Ranker()
    assert similarity_query((1, "seat"), "text", 3, None).key == (1, "seat")
    query = similarity_query((1, "seat"), "text", 3, ranker)
    assert query.key is None and query.ranker is ranker and query.text == "text"


@pytest.mark.parametrize("name", [n for n in memory_names() if n != "no_memory"])
def test_every_method_hands_other_keys_items_to_a_similarity_query(name):
    memory = build_memory(name)
    if hasattr(memory, "set_trial"):
        memory.set_trial(lambda precedent, kind: True)
    _observe_two_users(memory)
    keyed = memory.retrieve(similarity_query((1, "seat"), "user 2 seat", 20, None))
    assert {e.key for e in keyed} <= {(1, "seat")}
    found = memory.retrieve(similarity_query((1, "seat"), "what does user 2 prefer", 20, BM25Ranker()))
    assert (2, "seat") in {e.key for e in found}, name


def test_bm25_mode_scores_the_items_text_never_its_key():
    items = [
        Evidence(("tea", 1), "x", True, 0, "user 7 likes coffee"),
        Evidence((7, "drink"), "y", True, 1, "something else"),
    ]
    found = rank(items, similarity_query(None, "tea", 2, BM25Ranker()), top_k=5)
    assert found == []  # only the key says "tea"
    found = rank(items, similarity_query(None, "user 7 coffee", 2, BM25Ranker()), top_k=5)
    assert found == [items[0]]
    assert document(Evidence(1, "aisle", True, 0, "")) == "aisle"


def test_dense_mode_keeps_the_top_k_by_cosine_similarity_in_chronological_order():
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.array([vector(t) for t in texts], dtype=np.float32)

    ranker = DenseRanker(embed)
    items = [
        Evidence(i, str(i), True, 10 - i, text)
        for i, text in enumerate(["red apple", "blue sky", "red car", "green tea"])
    ]
    found = rank(items, similarity_query(None, "red", 0, ranker), top_k=2)
    assert [e.text for e in found] == ["red car", "red apple"]  # later t first in the prompt's order
    rank(items, similarity_query(None, "red", 0, ranker), top_k=2)
    assert sum(map(len, calls)) == 5  # the query and four texts, each embedded once


def test_an_unknown_retrieval_mode_stops_the_run_naming_the_key(compose):
    with pytest.raises(ConfigError, match=r"^retrieval.mode='cosine': must be one of keyed, bm25, dense$"):
        compose("retrieval.mode=cosine")
    with pytest.raises(ConfigError, match=r"^retrieval.top: not a key of retrieval mode bm25"):
        compose("retrieval=bm25", "+retrieval.top=3")


def test_dense_retrieval_without_the_embedding_extra_names_the_install_command(compose, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a)
    )
    with pytest.raises(
        ConfigError,
        match=r"^retrieval=dense needs the embedding extra \(onnxruntime\): pip install 'tepa-harness\[embed",
    ):
        compose("retrieval=dense")


def test_a_bm25_run_is_a_stream_of_its_own_named_by_its_mode(tiny_run):
    results = tiny_run("env=preference_stream", "memory=append_only", "retrieval=bm25")
    (meta_path,) = results.glob("runs/adhoc/preference_stream/append_only/*/seed=0/meta.json")
    assert meta_path.parent.parent.name == "max_episodes=8,retrieval.mode=bm25"
    meta = json.loads(meta_path.read_text())
    assert meta["identity"]["retrieval"] == {"mode": "bm25"}
    assert meta["config"]["retrieval"] == {"mode": "bm25"}


def test_a_sweep_over_modes_names_each_mode_in_its_directory():
    cfg = compose_config(["retrieval=dense"])
    variant = variant_of(
        cfg, {"env": "controlled_drift", "memory": "tepa_rev", "llm": "simulated"}, str(CONF_DIR)
    )
    assert variant.name == "retrieval.mode=dense"
    assert (
        check_retrieval({"mode": "dense", "cache_path": "x"}).identity()["model"] == "all-MiniLM-L6-v2-int8"
    )


def test_a_dense_score_depends_only_on_the_query_and_the_document_never_on_the_others_scored():
    rng = np.random.default_rng(3)
    texts = [f"t{i}" for i in range(40)]
    vectors = {
        t: v / np.linalg.norm(v) for t, v in zip(["q", *texts], rng.standard_normal((41, 384)), strict=True)
    }
    ranker = DenseRanker(lambda batch: np.array([vectors[t] for t in batch], dtype=np.float32))
    docs = [texts[i] for i in rng.integers(0, 40, 60)]
    scores = ranker.scores("q", docs)
    expected = [float(np.dot(vectors[d], vectors["q"])) for d in docs]
    assert np.allclose(scores, expected, atol=1e-6)
    for _ in range(5):  # other subsets, other orders, texts first seen in another order: the same floats
        fresh = DenseRanker(lambda batch: np.array([vectors[t] for t in batch], dtype=np.float32))
        fresh.scores("q", list(rng.permutation(texts)[:7]))
        subset = list(rng.permutation(docs)[:11])
        got = dict(zip(subset, fresh.scores("q", subset).tolist(), strict=True))
        assert all(got[d] == s for d, s in zip(docs, scores.tolist(), strict=True) if d in got)
    assert ranker.scores("q", docs).tobytes() == scores.tobytes()
    assert ranker.scores("q", docs[:1]).tobytes() == scores[:1].tobytes()
