"""The files of a stream's log, in one place for the runner that writes them and the analysis that reads
them: their names and folder layout, how episodes, lifecycle events and partial-log lines are encoded,
the checksums meta.json records, reading meta.json back (bounded), verifying a stream and moving one
aside.

A stream directory `results/runs/<experiment>/<env>/<memory>/seed=<n>/` (`stream_dir`) holds, once
complete, `episodes.parquet` (`parquet_bytes`), `archive.jsonl` (`jsonl_bytes`) and `meta.json`, whose
`files` records the sha256 and the row count of both as the runner wrote them; `verify` recomputes the
digests. A stream that fails is *moved aside* (`seed=0.corrupt-<UTC time>` beside it), never deleted: the
analysis skips such directories and the runner redoes the stream. While a stream runs, its episodes go to
`episodes.partial.jsonl` (one `dumps` line each, read back with `read_line` and `parse_line`; the
runner's `runners.store.runlog` writes and replays it). This module imports nothing of the project but
the record and event layouts (`analysis.record`, `analysis.events`), so both sides use it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import operator
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.events import FIELDS as EVENT_FIELDS
from analysis.record import INT64_MAX, SAMPLE, TYPES

META = "meta.json"
EPISODES = "episodes.parquet"
ARCHIVE = "archive.jsonl"
CHECKED = (EPISODES, ARCHIVE)
#: Deepest nesting of lists and objects a meta.json may have: the runner writes a handful of levels; a
#: deeper one is damage, and a very deep one would exhaust the recursion of whatever walks it.
MAX_DEPTH = 64
#: The suffix of a directory (or file) moved aside: "<name>.<reason>-<UTC time>", e.g. seed=0.corrupt-...
ASIDE = re.compile(r"\.[a-z-]+-\d{8}T\d{6}Z(-\d+)?$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_record(data: bytes, rows: int) -> dict[str, Any]:
    """What meta.json's `files` holds for one file written with content `data`."""
    return {"sha256": sha256(data), "bytes": len(data), "rows": rows}


def read_file(path: Path) -> bytes:
    """The bytes of a regular file. Anything else is an OSError at once, never a wait: a FIFO in place
    of a log would block a plain read until some writer opened it (and a signal would not end it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_meta(directory: Path) -> dict[str, Any]:
    """meta.json as a dict; a ValueError (one line naming the file) when it is missing, not a regular
    file, not JSON, not an object, or nested deeper than MAX_DEPTH."""
    path = directory / META
    try:
        meta = json.loads(read_file(path))
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a JSON object")
    if _depth(meta) > MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    return meta


def read_meta(directory: Path) -> dict[str, Any] | None:
    """meta.json as a dict; None when missing or unreadable (see `load_meta`)."""
    try:
        return load_meta(directory)
    except ValueError:
        return None


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and dicts, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def verify(directory: Path, meta: dict[str, Any]) -> str | None:
    """None when every file meta.json lists has its recorded size and sha256; otherwise one line that
    names the file and what is wrong with it."""
    files = meta.get("files")
    if not isinstance(files, dict) or not all(isinstance(files.get(n), dict) for n in CHECKED):
        return f"{directory / META}: records no checksums of {', '.join(CHECKED)}"
    for name in CHECKED:
        path, want = directory / name, files[name]
        try:
            data = read_file(path)
        except FileNotFoundError:
            return f"{path}: missing"
        except OSError as exc:
            return f"{path}: unreadable ({exc.strerror or exc})"
        if len(data) != want.get("bytes"):
            return f"{path}: {len(data)} bytes, meta.json records {want.get('bytes')}"
        if sha256(data) != want.get("sha256"):
            return f"{path}: sha256 differs from the one meta.json records (the file was changed or damaged)"
    return None


def aside_path(path: Path, reason: str) -> Path:
    """A free name beside `path` for moving it aside: `<name>.<reason>-<UTC time>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{n}")
        n += 1
    return target


def move_aside(path: Path, reason: str) -> Path:
    """Rename `path` (a stream directory or a file) to `aside_path(path, reason)`; returns the new name."""
    target = aside_path(path, reason)
    path.rename(target)
    return target


def is_aside(path: Path) -> bool:
    """Whether `path` or one of its parents was moved aside."""
    return any(ASIDE.search(part) for part in path.parts)


PARTIAL_EPISODES = "episodes.partial.jsonl"


#: Beside the partial log: the backend stats of the invocations that stopped before the stream was done,
#: so that the finished stream's meta.json totals what all of them spent.
PARTIAL_STATS = "episodes.partial.stats.json"


#: A partial-log line longer than this is damage, not an episode (a reply is a few kB at most).
MAX_LINE_BYTES = 1 << 20


#: zstd level and page size of the logged-sample columns in episodes.parquet (see `parquet_bytes`).
SAMPLE_LEVEL = 9


SAMPLE_PAGE_BYTES = 1 << 24


_UNIQUE_TEXT = frozenset({"evidence", "prompt"})


def stream_dir(
    results_dir: str | os.PathLike, experiment: str, env: str, memory: str, seed: int, variant: str = ""
) -> Path:
    """Where one stream's logs live; `variant` (a configuration that differs from the experiment's own,
    see `runners.store.identity`) adds one directory level above `seed=<n>`."""
    labelled = Path(results_dir) / "runs" / experiment / env / memory
    return (labelled / variant if variant else labelled) / f"seed={seed}"


def fingerprint(config: Mapping[str, Any]) -> str:
    """A short, stable hash of what determines a stream's episodes."""
    return hashlib.sha256(dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def episodes_table(records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The episodes as an Arrow table: columns in first-seen order, values as JSON would carry them
    (so a record replayed from the partial log and a fresh one give the same table). Only values that
    are not already JSON's own (str, int, float, bool, None) take the JSON round trip: episodes carry
    plain values, and the round trip per record was most of the cost of writing a stream."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    table = {}
    for name in columns:
        key = name if type(name) is str else json.loads(dumps({name: 0})).popitem()[0]
        try:
            values = list(map(operator.itemgetter(name), records))
        except KeyError:
            values = [record.get(name) for record in records]
        if not _PLAIN_TYPES.issuperset(map(type, values)):
            values = [v if type(v) in _PLAIN_TYPES else json.loads(dumps(v)) for v in values]
        table[key] = values
    return pa.table(table)


def parquet_bytes(records: Sequence[Mapping[str, Any]]) -> bytes:
    """`episodes.parquet`'s bytes: a deterministic function of the records.

    The logged-sample columns (`analysis.record.SAMPLE`) are compressed at zstd level SAMPLE_LEVEL, and
    `evidence` and `prompt`, whose values rarely repeat whole, are written without a dictionary and in
    one page: the long runs of text a row shares with an earlier one (Append-Only's prompts hold every
    observation of a key) then compress to about half of what the defaults give, in about the same
    time. The other columns keep the defaults, so their bytes are what they were before the sample."""
    table = episodes_table(records)
    names = table.column_names
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level={name: SAMPLE_LEVEL for name in SAMPLE if name in names} or None,
        use_dictionary=[name for name in names if name not in _UNIQUE_TEXT],
        data_page_size=SAMPLE_PAGE_BYTES,
    )
    return sink.getvalue().to_pybytes()


def jsonl_bytes(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """One JSON line per row, as `dumps` writes it."""
    return "".join(map(_line, rows)).encode()


def _line(row: Mapping[str, Any]) -> str:
    """A row's JSON line. A lifecycle event (`analysis.events.FIELDS`: those fields, in that order,
    of exactly those types) is written from a template that gives the encoder's text at about half its
    cost: a fact-heavy stream logs tens of thousands of events. Any other row goes through the encoder."""
    if tuple(row) == _EVENT_FIELDS and tuple(map(type, row.values())) == _EVENT_TYPES:
        t, event, reason, id_, key, value, s, f, state = row.values()
        enc = c_encode_basestring
        return (
            f'{{"t":{t},"event":{enc(event)},"reason":{enc(reason)},"id":{id_},"key":{enc(key)},'
            f'"value":{enc(value)},"s":{s},"f":{f},"state":{enc(state)}}}\n'
        )
    return dumps(row) + "\n"


def partial_summary(path: Path) -> tuple[dict[str, Any] | None, int]:
    """A partial log's identity (None when its header is unreadable) and how many lines follow it."""
    with open(path, "rb") as f:
        header, _ = read_line(f)
        head = parse_line(header) if header is not None else None
        return (head or {}).get("identity"), sum(1 for _ in f)


def record_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a logged episode holds a value no episode can have, or None. Every column of the record
    (`analysis.record.TYPES`, so a new column is checked too) must have its type, and every number is a
    count, a step or a time: an int in [0, 2**63 - 1] (what parquet's int64 holds), a float finite and
    >= 0. A missing column is left to the replay's own check (it rebuilds every column but the replies'
    own)."""
    for name, kind in TYPES.items():
        value = rec.get(name)
        if value is None:
            continue
        if kind is float:
            if type(value) not in (int, float):
                return f"field {name!r} is {type(value).__name__}, expected float"
            if not 0 <= value < math.inf:
                return f"field {name!r} is {value!r}, expected a finite number >= 0"
        elif type(value) is not kind:
            return f"field {name!r} is {type(value).__name__}, expected {kind.__name__}"
        elif kind is int and not 0 <= value <= INT64_MAX:
            return f"field {name!r} is {value}, expected an int in [0, 2**63 - 1]"
    return None


def read_line(f: IO[bytes]) -> tuple[bytes | None, bool]:
    """The next line without its newline (None at the end) and whether it ended with one. A line
    longer than MAX_LINE_BYTES is returned cut just past the limit, never read whole."""
    line = f.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None, False
    if line.endswith(b"\n"):
        return line[:-1], True
    if len(line) > MAX_LINE_BYTES:
        while (more := f.readline(MAX_LINE_BYTES)) and not more.endswith(b"\n"):
            pass  # skip the rest of the over-long line
    return line, False


def dumps(obj: Any, sort_keys: bool = False) -> str:
    if sort_keys:
        return _SORTED.encode(obj)
    if _plain_chunks is None or isinstance(obj, str):
        return _PLAIN.encode(obj)
    return "".join(_plain_chunks(obj, 0))


def _jsonable(obj: Any) -> Any:
    """numpy scalars, tuples-as-keys and the like: their plain Python form, else their str."""
    item = getattr(obj, "item", None)
    if callable(item):
        return item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


def parse_line(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None
    return obj if isinstance(obj, dict) else None


# One encoder each, built once: json.dumps with options builds a new encoder per call, which dominated
# writing the archive of fact-heavy streams.
_PLAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable)


_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable, sort_keys=True)


# `_PLAIN.encode` builds its C encoder anew on every call; this one is built once and gives the same text
# (it skips the check for circular references: records are trees). None where the C encoder is missing.
_plain_chunks = (
    c_make_encoder(None, _jsonable, c_encode_basestring, None, ":", ",", False, False, True)
    if c_make_encoder is not None and c_encode_basestring is not None
    else None
)


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


_EVENT_FIELDS, _EVENT_TYPES = tuple(EVENT_FIELDS), tuple(EVENT_FIELDS.values())
