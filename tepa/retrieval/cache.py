"""The on-disk cache of text embeddings: one SQLite file, rows keyed by model identity, dimension and text.

A run's texts repeat across its seeds, its methods and reruns; embedding each once per model keeps the
`dense` mode's cost to a dot product per item. Several processes of a sweep may share the file (WAL,
a lock timeout; a text embedded twice by two of them is stored once).

What the cache holds is checked both ways: vectors from the model must be finite, unit-norm rows of the
model's dimension before any is stored (else EmbeddingError, and nothing is stored), and every vector
read back is checked the same way. A damaged file (not a database, a corrupt one, a folder in its place,
a stored vector that fails the check) is moved aside, kept as `<name>.damaged-<time>` with its `-wal`
and `-shm`, with one warning, and the vectors are computed again into a fresh file. Rows of the format
before dimensions were part of the key (table `embeddings`) are checked and carried over once.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tepa.retrieval import EmbeddingError

log = logging.getLogger(__name__)

NORM_TOLERANCE = 1e-3  # a stored or computed vector's length must be 1 within this
_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (model TEXT, dims INTEGER, text TEXT, vector BLOB, PRIMARY KEY (model, dims, text))"  # noqa: E501
_COLUMNS = ["model", "dims", "text", "vector"]
_DAMAGE = ("SQLITE_NOTADB", "SQLITE_CORRUPT")


class _Damaged(Exception):
    """The cache file cannot be used as it is (the message says why)."""


def vector_problem(vectors: np.ndarray, dims: int) -> str | None:
    """Why `vectors` (rows) are not finite unit-norm rows of length `dims`, or None when they are."""
    if vectors.ndim != 2 or vectors.shape[1] != dims:
        return f"vectors of shape {vectors.shape}, not rows of {dims}"
    if not np.isfinite(vectors).all():
        return "a vector with a non-finite component"
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    if len(norms) and float(np.abs(norms - 1.0).max()) > NORM_TOLERANCE:
        return "a vector that is not of unit length"
    return None


class CachedEmbedder:
    """`embed` with its vectors kept in memory and stored in `path` under `model_id` and `dims` (None: no
    file). `dims`: the vectors' length (None: `embed.dims`, else the one length stored for `model_id`,
    else the first vectors'); `where` names the model in messages."""

    def __init__(
        self,
        embed: Callable[[list[str]], np.ndarray],
        model_id: str,
        path: str | None,
        dims: int | None = None,
        where: str = "the embedding model",
    ) -> None:
        self._embed = embed
        self._model = model_id
        self._where = where
        self.dims = dims if dims is not None else getattr(embed, "dims", None)
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None  # the file's, as opened (None: not opened)
        self._memo: dict[str, np.ndarray] = {}
        self.hits = self.misses = 0
        if path:
            self._guarded(self._db)
            if self.dims is None:
                query = "SELECT DISTINCT dims FROM vectors WHERE model = ?"
                stored = self._guarded(lambda: self._db().execute(query, (model_id,)).fetchmany(2))
                if stored and len(stored) == 1:
                    self.dims = int(stored[0][0])

    def __call__(self, texts: list[str]) -> np.ndarray:
        memo = self._memo
        found = {t: memo[t] for t in texts if t in memo}
        if len(found) < len(texts):
            found.update(self._lookup([t for t in dict.fromkeys(texts) if t not in found]))
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            vectors = np.asarray(self._embed(missing), dtype=np.float32)
            if self.dims is None and vectors.ndim == 2:
                self.dims = int(vectors.shape[1])
            problem = vector_problem(vectors, self.dims or 0)
            if problem is None and len(vectors) != len(missing):
                problem = f"{len(vectors)} vectors for {len(missing)} texts"
            if problem is not None:
                raise EmbeddingError(f"{self._where} returned {problem}: nothing was cached")
            found.update(zip(missing, vectors, strict=True))
            memo.update(zip(missing, vectors, strict=True))
            if self.path:
                rows = [
                    (self._model, self.dims, t, v.tobytes()) for t, v in zip(missing, vectors, strict=True)
                ]
                self._guarded(
                    lambda: self._db().executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?)", rows)
                )
        return np.vstack([found[t] for t in texts])

    def _lookup(self, texts: list[str]) -> dict[str, np.ndarray]:
        if not self.path or not texts or self.dims is None:
            return {}
        found = self._guarded(lambda: self._read(texts)) or {}
        self._memo.update(found)
        return found

    def _read(self, texts: list[str]) -> dict[str, np.ndarray]:
        assert self.dims is not None
        conn, dims, got = self._db(), self.dims, {}
        for i in range(0, len(texts), 500):
            part = texts[i : i + 500]
            marks = ",".join("?" * len(part))
            query = f"SELECT text, vector FROM vectors WHERE model = ? AND dims = ? AND text IN ({marks})"
            got.update(conn.execute(query, (self._model, dims, *part)).fetchall())
        if not got:
            return {}
        blobs = list(got.values())
        if any(not isinstance(b, bytes) or len(b) != 4 * dims for b in blobs):
            raise _Damaged(f"a stored vector is not {dims} float32 values")
        vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dims)
        problem = vector_problem(vectors, dims)
        if problem is not None:
            raise _Damaged(f"it holds {problem}")
        return dict(zip(got, vectors, strict=True))

    def _db(self) -> sqlite3.Connection:
        """The open connection (opened, and the file checked, on first use and after a move aside)."""
        if self._conn is None:
            self._open()
        assert self._conn is not None
        return self._conn

    def _open(self) -> None:
        assert self.path is not None
        path = Path(self.path)
        if path.exists() and not path.is_file():
            raise _Damaged("not a file")
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._conn = conn
        self._inode = os.stat(path).st_ino
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(vectors)")]
        if columns != _COLUMNS:
            raise _Damaged(f"its table has the columns {columns}")
        if conn.execute("PRAGMA table_info(embeddings)").fetchone() is not None:
            self._carry_over(conn)

    def _carry_over(self, conn: sqlite3.Connection) -> None:
        """Copy the checked rows of the format before dimensions were part of the key, then drop it."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            old = [row[1] for row in conn.execute("PRAGMA table_info(embeddings)")]
            if old != ["model", "text", "vector"]:  # another process carried it over meanwhile
                conn.execute("COMMIT")
                return
            kept = []
            for model, text, blob in conn.execute("SELECT model, text, vector FROM embeddings"):
                if not isinstance(blob, bytes) or not blob or len(blob) % 4:
                    continue
                vector = np.frombuffer(blob, dtype=np.float32)
                if vector_problem(vector[None], len(vector)) is None:
                    kept.append((model, len(vector), text, blob))
            conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?)", kept)
            conn.execute("DROP TABLE embeddings")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _guarded(self, action: Callable[[], Any]) -> Any:
        """`action` on the file; a damaged file is moved aside (one warning) and `action` tried once more
        on a fresh one (opened by `_db`); any other failure of the file is an EmbeddingError naming
        `retrieval.cache_path`."""
        for again in (False, True):
            try:
                return action()
            except (_Damaged, sqlite3.DatabaseError) as exc:
                damage = isinstance(exc, _Damaged) or (
                    str(getattr(exc, "sqlite_errorname", "")).startswith(_DAMAGE)
                )
                if not damage or again:
                    raise EmbeddingError(f"retrieval.cache_path={self.path}: {exc}") from None
                self._move_aside(str(exc))
            except OSError as exc:
                raise EmbeddingError(f"retrieval.cache_path={self.path}: {exc.strerror or exc}") from None
        return None  # not reached

    def _move_aside(self, reason: str) -> None:
        """Keep the damaged file (and its -wal, -shm) under another name and warn (`_db` then opens a
        fresh one)."""
        assert self.path is not None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        path = Path(self.path)
        stem = f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        aside, n = path.with_name(stem), 1
        while aside.exists():
            aside, n = path.with_name(f"{stem}-{n}"), n + 1
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            inode = None
        # Another process may have moved it aside already and made a fresh file: leave that one alone.
        if inode is not None and inode == (self._inode if self._inode is not None else inode):
            try:
                os.rename(path, aside)
                for suffix in ("-wal", "-shm"):
                    side = path.with_name(path.name + suffix)
                    if side.exists():
                        os.rename(side, aside.with_name(aside.name + suffix))
            except OSError as exc:
                raise EmbeddingError(
                    f"retrieval.cache_path={self.path} is damaged ({reason}) and cannot be moved aside: "
                    f"{exc.strerror or exc}"
                ) from None
            log.warning(
                "embedding cache %s is damaged (%s): moved to %s; its embeddings are computed again",
                self.path, reason, aside.name,
            )  # fmt: skip
        self._inode = None
