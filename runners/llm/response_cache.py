"""On-disk cache of model replies, so that rerunning an experiment against a real model is free and identical.

One SQLite file in WAL mode. A single connection per process is guarded by a lock, so concurrent streams
(threads or asyncio tasks) can share one cache, and several processes of a Hydra multirun can share one file
(SQLite's own locking, with a generous busy timeout). Only successful replies are stored, after the
backend has cut them to its length limit and scrubbed its key from them. A file that cannot serve as
the cache (not SQLite, damaged, unwritable) raises CacheError, one line without the SQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    truncated INTEGER NOT NULL DEFAULT 0
)
"""


class CacheError(Exception):
    """The cache file cannot be used; the message says why (the caller names the file)."""


@dataclass(frozen=True, slots=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    truncated: bool = False


def cache_key(model: str, messages: Sequence[Mapping[str, str]], params: Mapping[str, object]) -> str:
    """sha256 over the model name, the messages and the generation parameters.

    The openai backend puts its endpoint (without credentials) among the parameters: a reply cached
    from one server, garbled or unparseable ones included, is never served for another.
    """
    payload = json.dumps(
        {"model": model, "messages": [dict(m) for m in messages], "params": dict(params)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class ResponseCache:
    """A persistent map from `cache_key(...)` to a reply's text and token counts, with hit/miss counters."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._pid = -1

    def __repr__(self) -> str:
        return f"ResponseCache(path={str(self.path)!r})"

    def __getstate__(self) -> dict:
        # A connection cannot cross a process boundary; it is reopened on first use.
        return {"path": self.path, "hits": self.hits, "misses": self.misses}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])
        self.hits, self.misses = state["hits"], state["misses"]

    def _conn(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            except (OSError, sqlite3.Error) as exc:
                raise CacheError(f"cannot open the reply cache ({exc})") from None
            try:
                _setup(conn)
            except sqlite3.Error as exc:
                conn.close()
                raise CacheError(
                    f"not a usable reply cache ({exc}); move the file away or set another"
                ) from None
            self._connection, self._pid = conn, os.getpid()
        return self._connection

    def _execute(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, args)
        except sqlite3.Error as exc:
            raise CacheError(f"the reply cache failed ({exc})") from None

    def check(self) -> None:
        """Open the file (creating it if missing) and check that it is a reply cache; CacheError if not."""
        with self._lock:
            self._execute("SELECT COUNT(*) FROM replies").fetchone()

    def get(self, key: str) -> CachedReply | None:
        """The stored reply for `key`, counting a hit or a miss."""
        with self._lock:
            row = self._execute(
                "SELECT text, prompt_tokens, completion_tokens, truncated FROM replies WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
            return CachedReply(row[0], row[1], row[2], bool(row[3]))

    def put(
        self,
        key: str,
        model: str,
        text: str,
        prompt_tokens: int,
        completion_tokens: int,
        truncated: bool = False,
    ) -> None:
        """Store one successful reply (a later put for the same key replaces it)."""
        with self._lock:
            self._execute(
                "INSERT OR REPLACE INTO replies (key, model, text, prompt_tokens, completion_tokens, "
                "truncated) VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, text, int(prompt_tokens), int(completion_tokens), int(truncated)),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def stats(self) -> dict:
        return {"cache_hits": self.hits, "cache_misses": self.misses}

    def close(self) -> None:
        with self._lock:
            if self._connection is not None and self._pid == os.getpid():
                self._connection.close()
            self._connection = None


def _setup(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """WAL mode and the table. Switching to WAL takes an exclusive lock that SQLite's busy timeout does
    not wait for, so two processes opening a new file at once retry here instead of failing."""
    deadline = time.monotonic() + patience
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(replies)")}
            if "truncated" not in columns:  # a cache file made before replies were cut to a limit
                conn.execute("ALTER TABLE replies ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
