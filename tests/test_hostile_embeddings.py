"""Embeddings that cannot be trusted: an endpoint that answers NaN, infinities, vectors of the wrong or a
changing length, or trickles its reply; an embedding cache that is damaged on disk. Each is refused with
one line naming the endpoint (before anything is cached) or, for the cache, moved aside with one warning
and computed again; healthy vectors score as before."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runners.embed.endpoint import EndpointEmbedder, EndpointError
from runners.embed.retrieval import _ranker, check_retrieval
from tepa.retrieval import EmbeddingError
from tepa.retrieval.cache import CachedEmbedder
from tests.helpers.embeddings import DIMS, embeddings_body, vector
from tests.helpers.runner import cli
from tests.helpers.stub_server import StubReply

NAN = float("nan")


def _body(texts: list[str], vectors: list[list[float]]) -> dict:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "model": "emb", "data": data, "usage": {"prompt_tokens": 1, "total_tokens": 1}}


def _poisoned(change) -> callable:
    """A /v1/embeddings answer whose vector for every text but "probe" is `change(vector)`."""

    def respond(request: dict) -> dict:
        texts = request["input"]
        return _body(texts, [vector(t) if t == "probe" else change(vector(t)) for t in texts])

    return respond


def _stored(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT model, dims, text, vector FROM vectors").fetchall()


def _embedder(stub_server, timeout: float = 5.0, batch_size: int = 64) -> EndpointEmbedder:
    return EndpointEmbedder(stub_server.base_url, "emb", "NO_SUCH_KEY_VARIABLE", timeout, batch_size)


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda v: [NAN] * len(v), r"holds a non-finite component \(nan\)"),
        (lambda v: [*v[:-1], float("inf")], r"holds a non-finite component \(inf\)"),
        (lambda v: v[:-1], rf"has {DIMS - 1} components, earlier ones {DIMS}"),
        (lambda v: [0.0] * len(v), r"is all zeros"),
        (lambda v: [str(x) for x in v], r"is not a list of numbers"),
        (lambda v: [1e30] * len(v), r"overflows float32"),
    ],
    ids=["nan", "inf", "short", "zeros", "strings", "overflow"],
)
def test_a_nan_or_wrong_vector_from_an_endpoint_is_refused_in_one_line_naming_it_before_anything_is_cached(
    stub_server, tmp_path, change, says
):
    stub_server.respond = _poisoned(change)
    embed = _embedder(stub_server, batch_size=1)
    assert embed.probe() == DIMS
    path = tmp_path / "cache.sqlite"
    cached = CachedEmbedder(embed, "m", str(path), dims=embed.dims)
    with pytest.raises(EndpointError, match=rf"^retrieval.base_url={stub_server.base_url}: .*{says}"):
        cached(["probe", "red apple"])  # the first batch is healthy, the second is not: nothing is kept
    assert _stored(path) == []
    embed.close()


def test_ragged_vectors_in_one_reply_are_refused(stub_server):
    stub_server.respond = lambda r: _body(
        r["input"], [vector(t)[: DIMS - i] for i, t in enumerate(r["input"])]
    )
    with pytest.raises(EndpointError, match=rf"text 1 \('b'\) has {DIMS - 1} components, text 0's {DIMS}$"):
        _embedder(stub_server)(["a", "b"])


def test_an_endpoint_answering_nan_stops_the_run_with_one_line_and_a_later_healthy_run_is_unaffected(
    stub_server, tmp_path, tiny_run
):
    results = tmp_path / "results"
    args = (
        "env=preference_stream", "memory=append_only", "retrieval=dense",
        f"retrieval.base_url={stub_server.base_url}", "retrieval.model=emb", f"results_dir={results}",
        "max_episodes=8", "seeds=[0]", "progress=false",
    )  # fmt: skip
    stub_server.respond = _poisoned(lambda v: [NAN] * len(v))
    failed = cli(tmp_path, *args)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr
    (line,) = [
        x for x in failed.stderr.splitlines() if x.startswith(f"retrieval.base_url={stub_server.base_url}")
    ]
    assert "holds a non-finite component (nan)" in line
    assert all(
        np.isfinite(np.frombuffer(row[3], np.float32)).all()
        for row in _stored(results / "embedding_cache.sqlite")
    )

    stub_server.respond = embeddings_body
    _ranker.cache_clear()
    healed = tiny_run(*args[:5])
    _ranker.cache_clear()
    fresh = tiny_run(*args[:5], "retrieval.cache_path=null", f"results_dir={tmp_path / 'fresh'}")
    assert healed == results

    def episodes(folder: Path) -> pd.DataFrame:
        (log,) = folder.glob("runs/adhoc/preference_stream/append_only/*/seed=0/episodes.parquet")
        return pd.read_parquet(log).drop(columns=["latency"])

    assert len(episodes(healed)) == 8 and episodes(healed)["n_evidence"].sum() > 0
    pd.testing.assert_frame_equal(episodes(healed), episodes(fresh))


def test_a_cache_entry_of_another_dimension_is_never_used_and_the_change_gives_no_traceback(
    stub_server, tmp_path
):
    path = str(tmp_path / "cache.sqlite")
    params = {"mode": "dense", "base_url": stub_server.base_url, "model": "emb", "cache_path": path}
    docs = ["red apple", "blue sky", "red car"]
    stub_server.respond = embeddings_body
    _ranker.cache_clear()
    before = check_retrieval(params).ranker().scores("red", docs)
    short = DIMS // 2

    def halved(request: dict) -> dict:
        rows = [np.asarray(vector(t)[:short]) for t in request["input"]]
        return _body(request["input"], [(r / (np.linalg.norm(r) or 1.0)).tolist() for r in rows])

    stub_server.respond = halved  # the same URL and model name, another dimension
    _ranker.cache_clear()
    after = check_retrieval(params).ranker().scores("red", docs)
    _ranker.cache_clear()
    expected = [
        float(
            np.dot(
                halved({"input": [d]})["data"][0]["embedding"],
                halved({"input": ["red"]})["data"][0]["embedding"],
            )
        )
        for d in docs
    ]  # noqa: E501
    assert np.allclose(after, expected, atol=1e-6) and not np.allclose(after, before)
    assert sorted({row[1] for row in _stored(Path(path))}) == [short, DIMS]


def test_a_dimension_change_in_the_middle_of_a_run_is_refused_in_one_line(stub_server):
    stub_server.respond = embeddings_body
    embed = _embedder(stub_server)
    embed.probe()
    stub_server.respond = lambda r: _body(r["input"], [[1.0] * 8 for _ in r["input"]])
    with pytest.raises(EndpointError, match=rf"has 8 components, earlier ones {DIMS}$"):
        embed(["red apple"])


def test_a_trickling_endpoint_is_abandoned_at_retrieval_timeout(stub_server):
    stub_server.push(StubReply(body=embeddings_body({"input": ["red apple"]}), trickle=0.05))
    embed = _embedder(stub_server, timeout=1.0)
    began = time.monotonic()
    with pytest.raises(EndpointError, match=r"no complete reply within retrieval.timeout=1 s"):
        embed(["red apple"])
    assert time.monotonic() - began < 4.0
    embed.close()


def test_an_embedder_used_before_a_fork_still_embeds_in_the_child(stub_server):
    stub_server.respond = embeddings_body
    embed = _embedder(stub_server)
    embed.probe()  # the client's loop thread runs in this process only

    def child() -> None:
        os._exit(0 if np.allclose(embed(["red apple"])[0], vector("red apple"), atol=1e-6) else 1)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    if process.exitcode is None:
        process.kill()
        process.join()
    assert process.exitcode == 0
    embed.close()


def test_an_endpoint_flooding_its_reply_is_cut_off_at_the_body_limit(stub_server):
    stub_server.push(StubReply(flood=64 << 20))
    with pytest.raises(EndpointError, match=r"longer than \d+ bytes"):
        _embedder(stub_server, timeout=30.0)(["red apple"])
    assert stub_server.flooded < 32 << 20


def test_a_transient_failure_is_retried_within_the_deadline(stub_server):
    stub_server.push(StubReply(status=503, body={"error": {"message": "busy"}}))
    stub_server.respond = embeddings_body
    vectors = _embedder(stub_server)(["red apple"])
    assert np.allclose(vectors[0], vector("red apple"), atol=1e-6) and len(stub_server.requests) == 2


def _fake_embed(calls: list[list[str]]):
    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.array([vector(t) for t in texts], dtype=np.float32)

    return embed


def _damage_garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database, only bytes " * 200)


def _damage_folder(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("kept")


def _damage_short_blob(path: Path) -> None:
    CachedEmbedder(_fake_embed([]), "m", str(path), dims=DIMS)(["red apple"])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE vectors SET vector = ?", (b"\x00\x01\x02",))


def _damage_nan_row(path: Path) -> None:
    CachedEmbedder(_fake_embed([]), "m", str(path), dims=DIMS)(["red apple"])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE vectors SET vector = ?", (np.full(DIMS, np.nan, np.float32).tobytes(),))


@pytest.mark.parametrize(
    "damage", [_damage_garbage, _damage_folder, _damage_short_blob, _damage_nan_row],
    ids=["garbage", "folder", "short-blob", "nan-row"],
)  # fmt: skip
def test_a_damaged_cache_is_moved_aside_with_one_warning_and_computed_again(tmp_path, caplog, damage):
    path = tmp_path / "cache.sqlite"
    damage(path)
    calls: list[list[str]] = []
    with caplog.at_level(logging.WARNING, logger="tepa.retrieval.cache"):
        cached = CachedEmbedder(_fake_embed(calls), "m", str(path), dims=DIMS)
        vectors = cached(["red apple", "blue sky"])
    assert np.allclose(vectors, [vector("red apple"), vector("blue sky")], atol=1e-6)
    assert calls == [["red apple", "blue sky"]]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"embedding cache {path} is damaged (") and "\n" not in warning
    (aside,) = [
        p
        for p in tmp_path.iterdir()
        if p.name.startswith("cache.sqlite.damaged-")
        and "-wal" not in p.name[-4:]
        and not p.name.endswith("-shm")
    ]  # noqa: E501
    assert aside.name in warning
    if damage is _damage_garbage:
        assert aside.read_bytes().startswith(b"this is not a database")
    if damage is _damage_folder:
        assert (aside / "inside").read_text() == "kept"
    assert {row[2] for row in _stored(path)} == {"red apple", "blue sky"}  # the fresh file


def test_vectors_that_are_not_finite_are_never_stored_whatever_the_model(tmp_path):
    path = tmp_path / "cache.sqlite"

    def embed(texts: list[str]) -> np.ndarray:
        return np.full((len(texts), DIMS), np.nan, dtype=np.float32)

    with pytest.raises(
        EmbeddingError, match=r"^the local model x returned a vector with a non-finite component"
    ):
        CachedEmbedder(embed, "m", str(path), dims=DIMS, where="the local model x")(["red apple"])
    assert _stored(path) == []


def test_rows_of_the_format_before_dimensions_were_keyed_are_carried_over_when_finite(tmp_path):
    path = tmp_path / "cache.sqlite"
    good = np.asarray(vector("red apple"), np.float32)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE embeddings (model TEXT, text TEXT, vector BLOB, PRIMARY KEY (model, text))"
        )
        conn.execute("INSERT INTO embeddings VALUES ('m', 'red apple', ?)", (good.tobytes(),))
        conn.execute(
            "INSERT INTO embeddings VALUES ('m', 'blue sky', ?)",
            (np.full(DIMS, np.nan, np.float32).tobytes(),),
        )  # noqa: E501
    calls: list[list[str]] = []
    vectors = CachedEmbedder(_fake_embed(calls), "m", str(path), dims=DIMS)(["red apple", "blue sky"])
    assert calls == [["blue sky"]]  # the NaN row was not carried over
    assert vectors[0].tobytes() == good.tobytes()
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"vectors"}
