"""The on-disk log of one stream (experiment x env x memory x seed), and how it resumes.

A stream directory `results/runs/<experiment>/<env>/<memory>/seed=<n>/` holds, once complete:
- `episodes.parquet`: one row per decision episode. Deterministic: the same config and seed give a
  byte-identical file (no wall-clock columns; latency is the backend's, 0 for the simulated one);
- `archive.jsonl`: the lifecycle events (promotions, revocations, re-promotions, trials);
- `meta.json`: the resolved config, versions, git commit, wall time, backend stats, `complete: true`.
  It is written last, so its presence marks a complete stream.

While a stream runs, each episode is appended (and flushed) to `episodes.partial.jsonl`, whose first
line is the stream's config fingerprint. Lifecycle events are not logged as they happen: a resumed
stream rebuilds them exactly by replay, and writing them twice doubled the cost of fact-heavy streams.
A killed stream resumes by replaying the partial records (see `runners.loop.run_stream`), so its final
files equal those of an uninterrupted run.
Every final file is written atomically (a temporary file, then `os.replace`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

EPISODES = "episodes.parquet"
ARCHIVE = "archive.jsonl"
META = "meta.json"
PARTIAL_EPISODES = "episodes.partial.jsonl"


class StaleRunError(RuntimeError):
    """A complete stream on disk was made with a different config than the one asked for."""


def stream_dir(results_dir: str | os.PathLike, experiment: str, env: str, memory: str, seed: int) -> Path:
    """Where one stream's logs live."""
    return Path(results_dir) / "runs" / experiment / env / memory / f"seed={seed}"


def fingerprint(config: Mapping[str, Any]) -> str:
    """A short, stable hash of what determines a stream's episodes."""
    return hashlib.sha256(_dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def episodes_table(records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The episodes as an Arrow table: columns in first-seen order, values as JSON would carry them
    (so a record replayed from the partial log and a fresh one give the same table)."""
    rows = [json.loads(_dumps(r)) for r in records]
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pa.table({c: [row.get(c) for row in rows] for c in columns})


def parquet_bytes(records: Sequence[Mapping[str, Any]]) -> bytes:
    """`episodes.parquet`'s bytes: a deterministic function of the records."""
    sink = pa.BufferOutputStream()
    pq.write_table(episodes_table(records), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def jsonl_bytes(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return "".join(_dumps(r) + "\n" for r in rows).encode()


class StreamLog:
    """The files of one stream directory: completeness, the partial log, the final write."""

    def __init__(self, directory: Path, config_fingerprint: str) -> None:
        self.dir = directory
        self.fingerprint = config_fingerprint
        self._episodes: IO[str] | None = None

    def is_complete(self) -> bool:
        """True when every final file is there and meta.json says complete (for this config).

        Raises StaleRunError when the complete stream was made with a different config: rerunning
        would silently mix results, so the caller must choose another name or remove the directory.
        """
        meta = _read_json(self.dir / META)
        if not meta or meta.get("complete") is not True:
            return False
        if not (self.dir / EPISODES).is_file() or not (self.dir / ARCHIVE).is_file():
            return False
        if pq.read_metadata(self.dir / EPISODES).num_rows != meta.get("n_episodes"):
            return False
        if meta.get("fingerprint") != self.fingerprint:
            raise StaleRunError(
                f"{self.dir} holds a complete run of a different config; set another `name=...` "
                "(or results_dir) for this one, or delete that directory to redo it"
            )
        return True

    def discard_partial(self) -> None:
        (self.dir / PARTIAL_EPISODES).unlink(missing_ok=True)

    def replay(self) -> list[dict[str, Any]]:
        """The records an interrupted run of this config logged (the readable prefix of the partial
        log); empty, and the partial files removed, when there are none or they are another config's."""
        path = self.dir / PARTIAL_EPISODES
        if not path.is_file():
            return []
        lines = path.read_bytes().split(b"\n")
        header = _parse(lines[0])
        if not header or header.get("fingerprint") != self.fingerprint:
            self.discard_partial()
            return []
        records = []
        for line in lines[1:]:
            rec = _parse(line)
            if rec is None:  # the torn last line of a killed writer, or the final newline
                break
            records.append(rec)
        return records

    def open(self, replay: Sequence[Mapping[str, Any]]) -> None:
        """Start appending: rewrite the partial log as its header plus `replay` (dropping a torn
        tail), then keep it open for `append`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            self.dir / PARTIAL_EPISODES, jsonl_bytes([{"fingerprint": self.fingerprint}, *replay])
        )
        self._episodes = open(self.dir / PARTIAL_EPISODES, "a", encoding="utf-8")

    def append(self, record: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> None:
        """Log one episode as it finishes (the loop's `on_episode`); flushed, so a kill loses at most
        the episode being written. `events` are rebuilt by replay on resume (module docstring)."""
        assert self._episodes is not None, "StreamLog.open() first"
        self._episodes.write(_dumps(record) + "\n")
        self._episodes.flush()

    def close(self) -> None:
        if self._episodes is not None:
            self._episodes.close()
        self._episodes = None

    def finish(
        self,
        records: Sequence[Mapping[str, Any]],
        events: Sequence[Mapping[str, Any]],
        meta: Mapping[str, Any],
    ) -> None:
        """Write the final files (meta.json last: the completeness mark) and drop the partial log."""
        self.close()
        atomic_write_bytes(self.dir / EPISODES, parquet_bytes(records))
        atomic_write_bytes(self.dir / ARCHIVE, jsonl_bytes(events))
        full = {**meta, "fingerprint": self.fingerprint, "n_episodes": len(records), "n_events": len(events)}
        atomic_write_bytes(
            self.dir / META, (json.dumps({**full, "complete": True}, indent=2, default=str) + "\n").encode()
        )
        self.discard_partial()


def _dumps(obj: Any, sort_keys: bool = False) -> str:
    return (_SORTED if sort_keys else _PLAIN).encode(obj)


def _jsonable(obj: Any) -> Any:
    """numpy scalars, tuples-as-keys and the like: their plain Python form, else their str."""
    item = getattr(obj, "item", None)
    if callable(item):
        return item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return _parse(path.read_bytes())
    except OSError:
        return None


# One encoder each, built once: json.dumps with options builds a new encoder per call, which dominated
# writing the archive of fact-heavy streams.
_PLAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable)
_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable, sort_keys=True)
