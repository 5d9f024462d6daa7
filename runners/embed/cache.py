"""The on-disk cache of text embeddings: one SQLite file, rows keyed by model identity and text.

A run's texts repeat across its seeds, its methods and reruns; embedding each once per model keeps the
`dense` mode's cost to a dot product per item. Several processes of a sweep may share the file (WAL,
a lock timeout; a text embedded twice by two of them is stored once).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np


class CachedEmbedder:
    """`embed` with its vectors kept in memory and stored in `path` under `model_id` (None: no file)."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], model_id: str, path: str | None) -> None:
        self._embed = embed
        self._model = model_id
        self._conn: sqlite3.Connection | None = None
        self._memo: dict[str, np.ndarray] = {}
        self.hits = self.misses = 0
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings"
                " (model TEXT, text TEXT, vector BLOB, PRIMARY KEY (model, text))"
            )

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
            found.update(zip(missing, vectors, strict=True))
            memo.update(zip(missing, vectors, strict=True))
            if self._conn is not None:
                rows = [(self._model, t, v.tobytes()) for t, v in zip(missing, vectors, strict=True)]
                self._conn.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?)", rows)
        return np.vstack([found[t] for t in texts])

    def _lookup(self, texts: list[str]) -> dict[str, np.ndarray]:
        if self._conn is None or not texts:
            return {}
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(texts), 500):
            part = texts[i : i + 500]
            marks = ",".join("?" * len(part))
            query = f"SELECT text, vector FROM embeddings WHERE model = ? AND text IN ({marks})"
            for text, blob in self._conn.execute(query, (self._model, *part)):
                found[text] = np.frombuffer(blob, dtype=np.float32)
        self._memo.update(found)
        return found
