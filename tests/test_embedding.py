"""The dense mode's embeddings: the local ONNX model, the on-disk cache, and an OpenAI-compatible
/v1/embeddings endpoint (the loopback stub server)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runners.config import ConfigError
from runners.embed.endpoint import EndpointEmbedder, EndpointError
from runners.embed.retrieval import check_retrieval
from tepa.retrieval import local
from tepa.retrieval.cache import CachedEmbedder
from tests.helpers.embeddings import embeddings_body, vector
from tests.helpers.stub_server import StubReply


def test_the_local_model_puts_texts_about_the_same_thing_closest():
    embed = local.LocalEmbedder()
    a, b, c = embed(
        ["user 3 prefers aisle seats", "user 3 likes sitting on the aisle", "the stock market fell"]
    )
    assert a.shape == (384,) and abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    assert float(a @ b) > float(a @ c) + 0.2


def test_the_local_models_files_are_named_and_hashed_in_the_identity():
    identity = check_retrieval({"mode": "dense"}).identity()
    assert identity == {
        "mode": "dense",
        "model": "all-MiniLM-L6-v2-int8",
        "model_sha256": local.MODEL_SHA256,
        "tokenizer_sha256": local.TOKENIZER_SHA256,
    }


def test_embeddings_are_read_back_from_the_cache_file_instead_of_embedded_again(tmp_path):
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.array([vector(t) for t in texts], dtype=np.float32)

    path = str(tmp_path / "cache.sqlite")
    first = CachedEmbedder(embed, "m", path)(["a b", "c d"])
    again = CachedEmbedder(embed, "m", path)
    second = again(["c d", "a b", "e f"])
    assert calls == [["a b", "c d"], ["e f"]]
    assert np.array_equal(second[:2], first[::-1]) and (again.hits, again.misses) == (2, 1)
    CachedEmbedder(embed, "another model", path)(["a b"])
    assert calls[-1] == ["a b"]  # vectors are kept per model
    in_memory = CachedEmbedder(embed, "m", None)
    in_memory(["x y", "x y"]), in_memory(["x y"])
    assert calls[-1] == ["x y"] and len(calls) == 4  # without a file, each text is still embedded once


def test_an_endpoint_embeds_in_batches_in_the_order_asked(stub_server):
    stub_server.respond = embeddings_body
    embed = EndpointEmbedder(stub_server.base_url, "emb", "NO_SUCH_KEY_VARIABLE", 5.0, batch_size=2)
    vectors = embed(["red apple", "blue sky", "red car"])
    assert np.allclose(
        vectors, np.array([vector(t) for t in ("red apple", "blue sky", "red car")]), atol=1e-6
    )
    assert stub_server.paths == ["/v1/embeddings", "/v1/embeddings"]
    assert [r["input"] for r in stub_server.requests] == [["red apple", "blue sky"], ["red car"]]
    assert stub_server.requests[0]["model"] == "emb"


def test_an_endpoint_without_embeddings_stops_the_run_in_one_line_before_any_episode(stub_server, tiny_run):
    stub_server.push(StubReply(status=404, body={"error": {"message": "no route"}}))
    with pytest.raises(
        EndpointError, match=r"^retrieval.base_url=.*: the endpoint has no /v1/embeddings \(404\)$"
    ):
        tiny_run("retrieval=dense", f"retrieval.base_url={stub_server.base_url}", "retrieval.model=emb")
    assert stub_server.paths == ["/v1/embeddings"]


def test_a_dense_run_against_an_endpoint_retrieves_by_its_embeddings(stub_server, tiny_run):
    stub_server.respond = embeddings_body
    results = tiny_run(
        "env=preference_stream", "memory=append_only", "retrieval=dense",
        f"retrieval.base_url={stub_server.base_url}", "retrieval.model=emb",
    )  # fmt: skip
    (meta,) = results.glob("runs/adhoc/preference_stream/append_only/*/seed=0/meta.json")
    identity = json.loads(meta.read_text())["identity"]["retrieval"]
    assert identity == {"mode": "dense", "model": "emb", "base_url": stub_server.base_url}
    assert (results / "embedding_cache.sqlite").is_file()


def test_a_bad_dense_setting_names_its_key(compose):
    with pytest.raises(ConfigError, match=r"^retrieval.batch_size=0: must be a number > 0$"):
        compose("retrieval=dense", "retrieval.batch_size=0")
    with pytest.raises(
        ConfigError, match=r"^retrieval.model='bge': the local model is 'all-MiniLM-L6-v2-int8'"
    ):
        compose("retrieval=dense", "retrieval.model=bge")
    with pytest.raises(ConfigError, match=r"^retrieval.base_url='ftp://x': must be an http\(s\) URL"):
        compose("retrieval=dense", "retrieval.base_url=ftp://x")
